//! Fields of a query in people's language (`dir:`, `path:`, `type:`): they
//! narrow a search to some documents by their key, and are written as a
//! condition on `jobs.doc_key` that each engine puts beside its match.
//!
//! A key is the document's path relative to its source folder, `/`-joined
//! on every system, so these work the same on Linux, macOS and Windows.

/// What a field looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// `dir:notes`: the documents under that folder (at any depth).
    Dir,
    /// `path:report`: the documents whose path holds that text (ASCII case
    /// folded).
    Path,
    /// `type:pdf`: the documents of that type, by extension (`pdf`,
    /// `docx`…) or family ([`FAMILIES`]).
    Type,
}

impl Field {
    /// The field named `name` (`dir`, `folder`, `path`, `type`, `ext`), case
    /// folded.
    pub(crate) fn named(name: &str) -> Option<Field> {
        match name.to_ascii_lowercase().as_str() {
            "dir" | "folder" => Some(Field::Dir),
            "path" => Some(Field::Path),
            "type" | "ext" => Some(Field::Type),
            _ => None,
        }
    }
}

/// One field of a query: `-dir:archive` is `Filter { Dir, "archive", negated }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filter {
    pub field: Field,
    pub value: String,
    pub negated: bool,
}

/// Type names that stand for several extensions.
pub(crate) const FAMILIES: [(&str, &[&str]); 8] = [
    ("text", &["txt", "text", "log", "md", "markdown", "csv", "tsv"]),
    ("markdown", &["md", "markdown"]),
    ("html", &["html", "htm", "xhtml"]),
    ("word", &["docx", "doc", "odt", "rtf"]),
    ("spreadsheet", &["xlsx", "xls", "ods", "csv"]),
    ("presentation", &["pptx", "ppt", "odp"]),
    ("ebook", &["epub"]),
    ("office", &["docx", "xlsx", "pptx", "odt", "ods", "odp", "rtf"]),
];

/// Why a field's value cannot be taken, if it cannot.
pub(crate) fn refused(field: Field, value: &str) -> Option<String> {
    match field {
        Field::Type if !value.chars().all(|c| c.is_ascii_alphanumeric()) => Some(format!(
            "type: takes a file type or extension such as pdf, docx or text, not {value:?}"
        )),
        _ => None,
    }
}

/// The extensions `type:value` stands for.
fn extensions(value: &str) -> Vec<String> {
    let value = value.to_ascii_lowercase();
    match FAMILIES.iter().find(|(name, _)| *name == value) {
        Some((_, exts)) => exts.iter().map(|e| e.to_string()).collect(),
        None => vec![value],
    }
}

/// Which SQL a condition is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    // PostgreSQL only (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres,
}

/// A condition on `j.doc_key` with its parameters, numbered from the one
/// it was written for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Condition {
    pub sql: String,
    pub params: Vec<String>,
}

/// `filters` as one condition on `j.doc_key` (true when there are none):
/// the values of one field not negated are alternatives (`type:pdf
/// type:docx`), negated ones each exclude, and the fields all hold.
/// Parameters are numbered from `first`.
pub(crate) fn condition(filters: &[Filter], dialect: Dialect, first: usize) -> Condition {
    let mut out = Condition::default();
    let param = |value: String, out: &mut Condition| {
        out.params.push(value);
        match dialect {
            Dialect::Sqlite => format!("?{}", first + out.params.len() - 1),
            Dialect::Postgres => format!("${}", first + out.params.len() - 1),
        }
    };
    let mut all = Vec::new();
    for field in [Field::Dir, Field::Path, Field::Type] {
        let mut any = Vec::new();
        for f in filters.iter().filter(|f| f.field == field) {
            let one = match field {
                Field::Dir => {
                    let dir = f.value.trim_start_matches("./").trim_matches('/');
                    match dir.is_empty() {
                        true => "1 = 1".to_owned(),
                        // The keys below `dir/`: from `dir/` up to `dir0`
                        // ('0' follows '/'), an index range on the key.
                        false => format!(
                            "(j.doc_key >= {} AND j.doc_key < {})",
                            param(format!("{dir}/"), &mut out),
                            param(format!("{dir}0"), &mut out)
                        ),
                    }
                }
                Field::Path => {
                    let p = param(f.value.to_ascii_lowercase(), &mut out);
                    match dialect {
                        Dialect::Sqlite => format!("instr(lower(j.doc_key), {p}) > 0"),
                        Dialect::Postgres => format!("strpos(lower(j.doc_key), {p}) > 0"),
                    }
                }
                Field::Type => {
                    let likes: Vec<String> = extensions(&f.value)
                        .into_iter()
                        .map(|e| format!("lower(j.doc_key) LIKE {}", param(format!("%.{e}"), &mut out)))
                        .collect();
                    format!("({})", likes.join(" OR "))
                }
            };
            match f.negated {
                true => all.push(format!("NOT {one}")),
                false => any.push(one),
            }
        }
        if !any.is_empty() {
            all.push(format!("({})", any.join(" OR ")));
        }
    }
    out.sql = match all.is_empty() {
        true => "1 = 1".to_owned(),
        false => all.join(" AND "),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(field: Field, value: &str, negated: bool) -> Filter {
        Filter {
            field,
            value: value.into(),
            negated,
        }
    }

    #[test]
    fn fields_become_one_condition_with_numbered_parameters() {
        let c = condition(
            &[
                filter(Field::Type, "pdf", false),
                filter(Field::Dir, "./notes/", false),
                filter(Field::Type, "MD", false),
                filter(Field::Dir, "notes/old", true),
                filter(Field::Path, "Report", false),
            ],
            Dialect::Sqlite,
            3,
        );
        assert_eq!(
            c.sql,
            "NOT (j.doc_key >= ?5 AND j.doc_key < ?6) AND ((j.doc_key >= ?3 AND j.doc_key < ?4)) \
             AND (instr(lower(j.doc_key), ?7) > 0) AND ((lower(j.doc_key) LIKE ?8) OR (lower(j.doc_key) LIKE ?9))"
        );
        assert_eq!(
            c.params,
            [
                "notes/",
                "notes0",
                "notes/old/",
                "notes/old0",
                "report",
                "%.pdf",
                "%.md"
            ]
        );
        let pg = condition(&[filter(Field::Type, "word", false)], Dialect::Postgres, 7);
        assert_eq!(pg.params, ["%.docx", "%.doc", "%.odt", "%.rtf"]);
        assert!(pg.sql.starts_with("((lower(j.doc_key) LIKE $7 OR "), "{}", pg.sql);
        assert_eq!(condition(&[], Dialect::Sqlite, 1).sql, "1 = 1");
        assert!(refused(Field::Type, "p%").is_some() && refused(Field::Type, "pdf").is_none());
    }
}
