//! The two schema files, compiled in, and how they are read: each is a run
//! of `-- version: N` sections, and `schema.pg.sql` is the twin of
//! `schema.sql`, section for section (the tests below hold them so).

/// SQLite's schema: the one source of truth.
pub(crate) const SCHEMA_SQL: &str = include_str!("../../schema.sql");

/// PostgreSQL's schema, the twin of [`SCHEMA_SQL`].
#[cfg(feature = "postgres")]
pub(crate) const PG_SCHEMA_SQL: &str = include_str!("../../schema.pg.sql");

/// A schema file split into `(version, sql)` sections at its `-- version: N`
/// lines; what comes before the first is the file's header.
pub(crate) fn sections(schema: &str) -> Vec<(i64, String)> {
    let mut out: Vec<(i64, String)> = Vec::new();
    for line in schema.lines() {
        if let Some(v) = line.strip_prefix("-- version:") {
            if let Ok(v) = v.trim().parse() {
                out.push((v, String::new()));
                continue;
            }
        }
        if let Some(last) = out.last_mut() {
            last.1.push_str(line);
            last.1.push('\n');
        }
    }
    out
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;

    #[test]
    fn every_section_of_schema_sql_has_its_twin() {
        let versions = |text: &str| sections(text).into_iter().map(|s| s.0).collect::<Vec<_>>();
        assert_eq!(versions(PG_SCHEMA_SQL), versions(SCHEMA_SQL));
    }

    /// Tables of SQLite's search index with no twin: PostgreSQL indexes a
    /// document's first part only, so it keeps no further parts. And a
    /// table SQLite makes to replace one (a new table renamed over the old:
    /// version 17's history), where PostgreSQL changes it in place.
    const SQLITE_ONLY: &[&str] = &["search_parts", "history_appended"];

    #[test]
    fn each_table_created_in_a_section_is_created_in_its_twin() {
        let tables = |text: &str| -> Vec<(i64, Vec<String>)> {
            sections(text)
                .into_iter()
                .map(|(v, sql)| {
                    let names = sql
                        .lines()
                        .filter_map(|l| {
                            let l = l.trim_start();
                            // SQLite's search index is an FTS5 virtual table;
                            // its twin is a plain table.
                            l.strip_prefix("CREATE TABLE ")
                                .or_else(|| l.strip_prefix("CREATE VIRTUAL TABLE "))
                        })
                        .filter_map(|rest| rest.split_whitespace().next().map(str::to_string))
                        .filter(|name| !SQLITE_ONLY.contains(&name.as_str()))
                        .collect();
                    (v, names)
                })
                .collect()
        };
        assert_eq!(tables(PG_SCHEMA_SQL), tables(SCHEMA_SQL));
    }
}
