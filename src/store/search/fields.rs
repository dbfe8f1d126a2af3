//! Fields of a query in people's language (`dir:`, `path:`, `type:`): they
//! narrow a search to some documents by their key, and are written as a
//! condition on `jobs.doc_key` that each engine puts beside its match.
//!
//! A key is the document's path relative to its source folder: `/`-joined,
//! `\\`-joined when it was made on Windows, `hex:` and the bytes for a name
//! that is not UTF-8; the conditions read all three.

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
    if value.trim().is_empty() {
        return Some(match field {
            Field::Dir => "dir: takes a folder, such as dir:notes".into(),
            Field::Path => "path: takes a piece of a path, such as path:2026".into(),
            Field::Type => "type: takes a file type or extension, such as type:pdf".into(),
        });
    }
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
    let mut all = Vec::new();
    for field in [Field::Dir, Field::Path, Field::Type] {
        let mut any = Vec::new();
        for f in filters.iter().filter(|f| f.field == field) {
            let mut sql = Sql {
                dialect,
                first,
                out: &mut out,
            };
            let one = match field {
                Field::Dir => sql.under(&f.value),
                Field::Path => sql.holds(&f.value),
                Field::Type => sql.of_type(&f.value),
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

/// Writes one field's condition, binding its values.
struct Sql<'a> {
    dialect: Dialect,
    first: usize,
    out: &'a mut Condition,
}

impl Sql<'_> {
    /// A placeholder bound to `value`.
    fn param(&mut self, value: String) -> String {
        self.out.params.push(value);
        let n = self.first + self.out.params.len() - 1;
        match self.dialect {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }

    /// The key folded to ASCII lower case alike on both engines: SQLite's
    /// `lower()` folds ASCII only, and PostgreSQL's does under the C
    /// collation.
    fn folded(&self) -> &'static str {
        match self.dialect {
            Dialect::Sqlite => "lower(j.doc_key)",
            Dialect::Postgres => "lower(j.doc_key COLLATE \"C\")",
        }
    }

    /// The keys that start with `prefix`. On SQLite a range of the
    /// binary collation, up to `prefix` with its last character's
    /// successor; on PostgreSQL `starts_with`, which no collation sorts (its
    /// default one sorts keys as words).
    fn starting(&mut self, prefix: &str) -> String {
        match self.dialect {
            Dialect::Postgres => format!("starts_with(j.doc_key, {})", self.param(prefix.to_owned())),
            Dialect::Sqlite => {
                let mut end = prefix.to_owned();
                let last = end.pop().expect("a prefix ends with a separator");
                end.push(char::from_u32(last as u32 + 1).expect("a separator's successor"));
                format!(
                    "(j.doc_key >= {} AND j.doc_key < {})",
                    self.param(prefix.to_owned()),
                    self.param(end)
                )
            }
        }
    }

    /// `dir:`: the keys below the folder, whichever separator the keys
    /// were made with (`/`; `\\` on Windows), and the `hex:` keys of names
    /// that are not UTF-8 (hex keeps a prefix a prefix).
    fn under(&mut self, value: &str) -> String {
        let dir = value.replace('\\', "/");
        let dir = dir.trim_start_matches("./").trim_matches('/');
        if dir.is_empty() || dir == "." {
            return "1 = 1".to_owned();
        }
        let mut any = Vec::new();
        for sep in ['/', '\\'] {
            let prefix = format!("{}{sep}", dir.replace('/', &sep.to_string()));
            any.push(self.starting(&prefix));
        }
        let hex = format!("hex:{}", hex::encode(format!("{dir}/")));
        any.push(self.starting(&hex));
        format!("({})", any.join(" OR "))
    }

    /// `path:`: the key, its separators read as `/` and ASCII case folded,
    /// holds the text; a `hex:` key holds only hex digits, so it is left out.
    fn holds(&mut self, value: &str) -> String {
        let needle = self.param(value.replace('\\', "/").to_ascii_lowercase());
        let key = format!("replace({}, '\\', '/')", self.folded());
        let find = match self.dialect {
            Dialect::Sqlite => format!("instr({key}, {needle}) > 0"),
            Dialect::Postgres => format!("strpos({key}, {needle}) > 0"),
        };
        format!("({find} AND j.doc_key NOT LIKE 'hex:%')")
    }

    /// `type:`: the file name ends in `.ext` after at least one character
    /// (`.bashrc` is a name, not an extension), for each extension the
    /// type stands for.
    fn of_type(&mut self, value: &str) -> String {
        let key = self.folded();
        let likes: Vec<String> = extensions(value)
            .into_iter()
            .map(|e| {
                let ends = self.param(format!("%_.{e}"));
                let hidden = self.param(format!("%/.{e}"));
                format!("({key} LIKE {ends} AND {key} NOT LIKE {hidden})")
            })
            .collect();
        format!("({})", likes.join(" OR "))
    }
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
                filter(Field::Dir, "notes\\old", true),
                filter(Field::Path, "Report", false),
            ],
            Dialect::Sqlite,
            3,
        );
        assert_eq!(
            c.params,
            [
                // The folder, under either separator and as hex.
                "notes/",
                "notes0",
                "notes\\",
                "notes]",
                "hex:6e6f7465732f",
                "hex:6e6f7465732g",
                // The negated one.
                "notes/old/",
                "notes/old0",
                "notes\\old\\",
                "notes\\old]",
                "hex:6e6f7465732f6f6c642f",
                "hex:6e6f7465732f6f6c642g",
                "report",
                "%_.pdf",
                "%/.pdf",
            ]
        );
        for n in 3..3 + c.params.len() {
            assert!(c.sql.contains(&format!("?{n}")), "?{n} in {}", c.sql);
        }
        assert!(c.sql.starts_with("NOT ("), "{}", c.sql);
        let pg = condition(
            &[filter(Field::Type, "word", false), filter(Field::Dir, "a", false)],
            Dialect::Postgres,
            7,
        );
        assert_eq!(pg.params.len(), 3 + 8);
        assert!(pg.sql.contains("starts_with(j.doc_key, $7)"), "{}", pg.sql);
        assert!(
            pg.sql.contains("lower(j.doc_key COLLATE \"C\") LIKE $10"),
            "{}",
            pg.sql
        );
        assert_eq!(condition(&[], Dialect::Sqlite, 1).sql, "1 = 1");
        assert_eq!(
            condition(&[filter(Field::Dir, ".", false)], Dialect::Sqlite, 1).sql,
            "(1 = 1)"
        );
        assert!(refused(Field::Type, "p%").is_some() && refused(Field::Type, "pdf").is_none());
        assert!(refused(Field::Dir, "").is_some() && refused(Field::Path, " ").is_some());
    }
}
