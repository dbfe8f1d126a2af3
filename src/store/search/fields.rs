//! Fields of a query in people's language (`dir:`, `path:`, `type:`,
//! `size>`/`size<`, `after:`, `before:`): they narrow a search to some
//! documents by their key or by their source's size and modification time,
//! and are written as a condition on the `jobs` row (`j`) that each engine
//! puts beside its match.
//!
//! Size and time come from the source's fingerprint as the last scan
//! recorded it (`source_stat`: `SIZE:SECONDS.NANOS:LINK` for a file that
//! could be read), so they need no column of their own; a document without
//! one (an HTTP source, an unreadable file) matches no size or date, and is
//! kept by a negated one.
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
    /// `size>1MB`, `size<=500kB` (or `size:>1MB`): by the source's size.
    Size,
    /// `after:2026-01-01`: modified on that day (UTC) or later.
    After,
    /// `before:2026-01-01`: modified before that day (UTC).
    Before,
}

impl Field {
    /// The field named `name` (`dir`, `folder`, `path`, `type`, `ext`), case
    /// folded.
    pub(crate) fn named(name: &str) -> Option<Field> {
        match name.to_ascii_lowercase().as_str() {
            "dir" | "folder" => Some(Field::Dir),
            "path" => Some(Field::Path),
            "type" | "ext" => Some(Field::Type),
            "size" => Some(Field::Size),
            "after" => Some(Field::After),
            "before" => Some(Field::Before),
            _ => None,
        }
    }

    /// Whether several values of the field are alternatives (`type:pdf
    /// type:docx`) rather than each a bound that must hold (`size>1MB
    /// size<10MB`, `after:2026 before:2027`).
    fn alternatives(self) -> bool {
        matches!(self, Field::Dir | Field::Path | Field::Type)
    }
}

/// A size bound: `>N`, `>=N`, `<N` or `<=N` bytes (N as `--max-input`
/// takes it: `1MB`, `500kB`, `2MiB`, or bytes; `0` too).
fn size_bound(value: &str) -> Result<(&'static str, u64), String> {
    let form = || format!("size takes a bound such as size>1MB or size<=500kB, not {value:?}");
    let (op, number) = [">=", "<=", ">", "<"]
        .into_iter()
        .find_map(|op| value.strip_prefix(op).map(|n| (op, n)))
        .ok_or_else(form)?;
    let bytes = match number.trim() {
        "0" => 0,
        n => crate::size::parse_size(n).map_err(|why| format!("size{op}{n}: {why}"))?,
    };
    Ok((op, bytes))
}

/// The first second (UTC, since 1970) of the day `value` names:
/// `YYYY-MM-DD`, or `YYYY-MM` and `YYYY` for the first day of a month or
/// year; from 1970 on (a file dated earlier is found by `before:1971`).
fn day_start(field: Field, value: &str) -> Result<i64, String> {
    let name = if field == Field::After { "after" } else { "before" };
    let form = || format!("{name}: takes a date such as {name}:2026-01-31, 2026-01 or 2026, not {value:?}");
    let parts: Vec<&str> = value.split('-').collect();
    let day = match parts.as_slice() {
        [y] => format!("{y}-01-01"),
        [y, m] => format!("{y}-{m}-01"),
        [y, m, d] => format!("{y}-{m}-{d}"),
        _ => return Err(form()),
    };
    let well_formed = day.len() == 10
        && day
            .bytes()
            .enumerate()
            .all(|(i, b)| (i == 4 || i == 7) == (b == b'-'));
    if !well_formed {
        return Err(form());
    }
    if day.as_str() < "1970" {
        return Err(format!("{name}: takes a date from 1970 on, not {value:?}"));
    }
    let at = humantime::parse_rfc3339(&format!("{day}T00:00:00Z")).map_err(|_| form())?;
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| form())?
        .as_secs();
    i64::try_from(secs).map_err(|_| form())
}

/// One field of a query: `-dir:archive` is `Filter { Dir, "archive", negated }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filter {
    pub field: Field,
    pub value: String,
    pub negated: bool,
}

/// Type names that stand for several extensions.
pub(crate) const FAMILIES: [(&str, &[&str]); 10] = [
    ("text", &["txt", "text", "log", "md", "markdown", "csv", "tsv"]),
    ("markdown", &["md", "markdown"]),
    ("html", &["html", "htm", "xhtml"]),
    ("word", &["docx", "doc", "odt", "rtf", "hwp", "hwpx"]),
    ("spreadsheet", &["xlsx", "xls", "ods", "csv"]),
    ("presentation", &["pptx", "ppt", "odp"]),
    ("ebook", &["epub"]),
    ("mail", &["eml", "mbox"]),
    ("image", &["png", "jpg", "jpeg", "tif", "tiff", "webp", "gif"]),
    (
        "office",
        &["docx", "xlsx", "pptx", "odt", "ods", "odp", "rtf", "hwp", "hwpx"],
    ),
];

/// Why a field's value cannot be taken, if it cannot.
pub(crate) fn refused(field: Field, value: &str) -> Option<String> {
    if value.trim().is_empty() {
        return Some(match field {
            Field::Dir => "dir: takes a folder, such as dir:notes".into(),
            Field::Path => "path: takes a piece of a path, such as path:2026".into(),
            Field::Type => "type: takes a file type or extension, such as type:pdf".into(),
            Field::Size => "size takes a bound, such as size>1MB".into(),
            Field::After => "after: takes a date, such as after:2026-01-31".into(),
            Field::Before => "before: takes a date, such as before:2026-01-31".into(),
        });
    }
    match field {
        Field::Type if !value.chars().all(|c| c.is_ascii_alphanumeric()) => Some(format!(
            "type: takes a file type or extension such as pdf, docx or text, not {value:?}"
        )),
        Field::Size => size_bound(value).err(),
        Field::After | Field::Before => day_start(field, value).err(),
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

/// What a `dir:` value becomes when it names a folder keyed relative to it
/// itself (`dir:/home/me/docs` for that folder): every key that is not a
/// full path. A NUL, which no query can hold, keeps it apart from values
/// people write.
const WHOLE_RELATIVE_FOLDER: &str = "\0whole relative folder";

/// `filters` with each `dir:` value that is a full path inside one of
/// `folders` (root, key prefix) written as that folder's keys are: the
/// path below the root for a folder keyed relative to it (the folder
/// itself: [`WHOLE_RELATIVE_FOLDER`]); a full path stays one, as the keys
/// of a folder keyed by full path are.
pub(crate) fn in_folders(mut filters: Vec<Filter>, folders: &[(std::path::PathBuf, String)]) -> Vec<Filter> {
    for f in filters.iter_mut().filter(|f| f.field == Field::Dir) {
        let path = std::path::Path::new(&f.value);
        if !path.is_absolute() {
            continue;
        }
        let relative = folders.iter().filter(|(_, prefix)| prefix.is_empty());
        let Some(below) = relative
            .filter_map(|(root, _)| path.strip_prefix(root).ok())
            .next()
        else {
            continue;
        };
        f.value = match below.as_os_str().is_empty() {
            true => WHOLE_RELATIVE_FOLDER.to_owned(),
            false => below.to_string_lossy().replace('\\', "/"),
        };
    }
    filters
}

/// `filters` as one condition on the row `j` (true when there are none):
/// the values of one of `dir:`, `path:` and `type:` not negated are
/// alternatives (`type:pdf type:docx`), a size or date is a bound that
/// holds with the others, negated ones each exclude, and the fields all
/// hold. Parameters are numbered from `first`.
pub(crate) fn condition(filters: &[Filter], dialect: Dialect, first: usize) -> Condition {
    let mut out = Condition::default();
    let mut all = Vec::new();
    for field in [
        Field::Dir,
        Field::Path,
        Field::Type,
        Field::Size,
        Field::After,
        Field::Before,
    ] {
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
                Field::Size => sql.sized(&f.value),
                Field::After | Field::Before => sql.modified(field, &f.value),
            };
            match (f.negated, field.alternatives()) {
                (true, _) => all.push(format!("NOT {one}")),
                (false, true) => any.push(one),
                (false, false) => all.push(one),
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
    /// that are not UTF-8 (hex keeps a prefix a prefix). A full path
    /// (`dir:/home/me/notes`) takes the keys that start with it: those of a
    /// folder added beside a data directory's first one are full paths.
    fn under(&mut self, value: &str) -> String {
        if value == WHOLE_RELATIVE_FOLDER {
            // This system's separator: a relative key on Unix may start
            // with a backslash (`is_full_path_key`).
            return format!("(substr(j.doc_key, 1, 1) <> '{}')", std::path::MAIN_SEPARATOR);
        }
        let dir = value.replace('\\', "/");
        if dir.starts_with('/') {
            return self.starting(&format!("{}/", dir.trim_end_matches('/')));
        }
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

    /// The source's size in bytes from its fingerprint, NULL without one.
    fn size(&self) -> &'static str {
        match self.dialect {
            Dialect::Sqlite => {
                "(CASE WHEN j.source_stat GLOB '[0-9]*:*' THEN CAST(j.source_stat AS INTEGER) END)"
            }
            Dialect::Postgres => {
                "(CASE WHEN j.source_stat ~ '^[0-9]+:' THEN split_part(j.source_stat, ':', 1)::BIGINT END)"
            }
        }
    }

    /// The source's modification time (whole seconds since 1970, UTC) from
    /// its fingerprint, NULL without one.
    fn mtime(&self) -> &'static str {
        match self.dialect {
            Dialect::Sqlite => {
                "(CASE WHEN j.source_stat GLOB '[0-9]*:*' \
                 THEN CAST(substr(j.source_stat, instr(j.source_stat, ':') + 1) AS INTEGER) END)"
            }
            Dialect::Postgres => {
                "(CASE WHEN j.source_stat ~ '^[0-9]+:-?[0-9]+' \
                 THEN substring(j.source_stat from '^[0-9]+:(-?[0-9]+)')::BIGINT END)"
            }
        }
    }

    /// `size>N` and the like; false (not unknown) for a document without a
    /// size, so that a negated bound keeps it. The bound is a number this
    /// reader parsed, written into the SQL.
    fn sized(&mut self, value: &str) -> String {
        let (op, bytes) = size_bound(value).expect("checked when the query was read");
        format!("COALESCE({} {op} {bytes}, FALSE)", self.size())
    }

    /// `after:`/`before:` a day: modified at or after its first second, or
    /// before it; false for a document without a time.
    fn modified(&mut self, field: Field, value: &str) -> String {
        let at = day_start(field, value).expect("checked when the query was read");
        let op = if field == Field::After { ">=" } else { "<" };
        format!("COALESCE({} {op} {at}, FALSE)", self.mtime())
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

    /// A full path in `dir:` is written as its folder's keys are.
    #[cfg(unix)]
    #[test]
    fn a_full_path_in_dir_is_read_in_its_folder() {
        let folders = [
            (std::path::PathBuf::from("/home/u/docs"), String::new()),
            (
                std::path::PathBuf::from("/home/u/notes"),
                "/home/u/notes/".to_owned(),
            ),
        ];
        let values = |given: &[&str]| -> Vec<String> {
            let filters = given.iter().map(|v| filter(Field::Dir, v, false)).collect();
            in_folders(filters, &folders)
                .into_iter()
                .map(|f| f.value)
                .collect()
        };
        assert_eq!(
            values(&[
                "/home/u/docs/a/b",
                "/home/u/notes/x",
                "rel",
                "/elsewhere",
                "/home/u/docs2"
            ]),
            ["a/b", "/home/u/notes/x", "rel", "/elsewhere", "/home/u/docs2"]
        );
        assert_eq!(values(&["/home/u/docs"]), [WHOLE_RELATIVE_FOLDER]);
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let whole = condition(&[filter(Field::Dir, WHOLE_RELATIVE_FOLDER, false)], dialect, 1);
            assert!(
                whole.sql.contains("<> '/'") && whole.params.is_empty(),
                "{}",
                whole.sql
            );
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
        // The dir's three, and two for each of the word family's six extensions.
        assert_eq!(pg.params.len(), 3 + 12);
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

        // Sizes and dates: bounds that all hold, written as numbers.
        let c = condition(
            &[
                filter(Field::Size, ">1kB", false),
                filter(Field::Size, "<=2MiB", false),
                filter(Field::After, "2026-01", false),
                filter(Field::Before, "2025", true),
            ],
            Dialect::Sqlite,
            1,
        );
        assert!(c.params.is_empty());
        assert!(
            c.sql.contains(" > 1000, FALSE)") && c.sql.contains(" <= 2097152, FALSE)"),
            "{}",
            c.sql
        );
        assert!(c.sql.contains(" >= 1767225600, FALSE)"), "{}", c.sql);
        assert!(
            c.sql.contains("NOT COALESCE(") && c.sql.contains(" < 1735689600, FALSE)"),
            "{}",
            c.sql
        );
        assert!(!c.sql.contains(" OR "), "bounds are not alternatives: {}", c.sql);
        assert_eq!(
            size_bound("=0").unwrap_err(),
            "size takes a bound such as size>1MB or size<=500kB, not \"=0\""
        );
        assert_eq!(size_bound(">0"), Ok((">", 0)));
        assert!(size_bound(">1XB").unwrap_err().contains("unknown unit"));
        assert_eq!(day_start(Field::Before, "1970-01-02"), Ok(86_400));
        assert!(day_start(Field::Before, "1969-12-31")
            .unwrap_err()
            .contains("from 1970 on"));
        for bad in [
            "2026-13-01",
            "2026-02-30",
            "26-01-01",
            "2026-1-1",
            "yesterday",
            "2026-01-01-01",
        ] {
            assert!(refused(Field::After, bad).is_some(), "{bad}");
        }
        assert!(refused(Field::Dir, "").is_some() && refused(Field::Path, " ").is_some());
    }
}
