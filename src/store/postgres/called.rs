//! The statements that commit on their own (a claim, a completion, the
//! batch statement) as functions the database keeps: their call is kept
//! prepared on a connection of its own server session, and sent unnamed
//! behind a pooler per transaction (`pooler.rs`).
//!
//! Why: these statements' plans cost more than their runs (DESIGN §12).
//! A prepared statement is planned for each run's values until the server
//! finds a plan for any values no dearer, and the batch statement's never
//! is (its `LIMIT $3` is costed as a tenth of the table); behind a pooler
//! an unnamed statement is planned on every run. A function's statement is
//! planned by the server session that runs it and its plan kept there, and
//! the function's own settings ([`SETTINGS`]) make that plan the generic
//! one from the first run. A generic plan is made once for the table as it
//! then was: one made while the queue was nearly empty read the whole table
//! for every claim once it had grown (a sequential scan, kept until the
//! next `ANALYZE`), so the settings also rule sequential scans out (each of
//! these statements reads its rows through an index whatever the table
//! holds), and JIT compilation off (the generic plan's estimate is over
//! JIT's threshold; compiling took ~50 ms a batch). Nothing of ours lives
//! in a session: every server session of a pool serves every client.
//!
//! A function is named by a digest of the statement's text
//! (`leasehold_q_` and 16 hex digits), made once per database and text
//! under an advisory lock (two processes making it at once would collide),
//! inside a transaction of its own; a text changed by a newer release makes
//! another function beside it. Its parameters and columns are the
//! statement's own types; its body is the statement, run by
//! `RETURN QUERY`, with columns before variables on a clash of names.

use ::postgres::types::{Kind, Type};
use ::postgres::Statement;

use super::conn::{Fail, Sql};

/// The advisory lock key under which functions are made ("lhfn").
const FUNCTION_LOCK: i64 = 0x6c68_666e;

/// The settings a function runs its statement with (see the module's
/// docs): one plan for any values, made from indexes, never compiled. Part
/// of the function's name, so that one made without them is not used.
const SETTINGS: &str = "SET plan_cache_mode = force_generic_plan SET jit = off SET enable_seqscan = off";

/// A statement's function: its name and the call that runs it.
pub(crate) struct Called {
    pub(crate) call: String,
    pub(crate) params: Vec<Type>,
}

/// The function of `sql` (prepared as `statement` in `tx`, which the caller
/// commits), made in the database if it is not there. Every statement that
/// commits on its own answers rows; one without a column has no function
/// (`RETURNS TABLE` needs one) and is refused.
pub(crate) fn function_of(
    tx: &mut ::postgres::Transaction<'_>,
    sql: &str,
    statement: &Statement,
) -> Sql<Called> {
    if statement.columns().is_empty() {
        return Err(Fail::Refused(
            "a statement that commits on its own answers no column: it cannot be a function".into(),
        ));
    }
    let params: Vec<Type> = statement.params().to_vec();
    let signature: Vec<String> = params.iter().map(sql_type).collect();
    let columns: Vec<String> = statement.columns().iter().map(|c| sql_type(c.type_())).collect();
    let name = name_of(sql, &columns);
    let wanted = format!("{name}({})", signature.join(", "));
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&FUNCTION_LOCK])?;
    let there = tx
        .query_one("SELECT to_regprocedure($1) IS NOT NULL", &[&wanted])?
        .try_get::<_, bool>(0)?;
    if !there {
        tx.batch_execute(&definition(&name, &signature, &columns, sql))?;
    }
    let args: Vec<String> = (1..=params.len()).map(|i| format!("${i}")).collect();
    Ok(Called {
        call: format!("SELECT * FROM {name}({})", args.join(", ")),
        params,
    })
}

/// `leasehold_q_` and the first 16 hex digits of the SHA-256 of the text
/// and its columns' types (a schema that changed a column's type makes
/// another function; the parameters' types are in its signature) and its
/// settings.
fn name_of(sql: &str, columns: &[String]) -> String {
    let described = format!("{sql}\n-- returns {}\n-- {SETTINGS}", columns.join(", "));
    let digest = crate::digest::sha256_hex(&mut described.as_bytes()).unwrap_or_default();
    format!("leasehold_q_{}", digest.get(..16).unwrap_or("0"))
}

/// `CREATE FUNCTION` for `sql`: its columns named `r1`… (no statement of
/// ours names a column so).
fn definition(name: &str, signature: &[String], column_types: &[String], sql: &str) -> String {
    let columns: Vec<String> = column_types
        .iter()
        .enumerate()
        .map(|(i, t)| format!("r{} {t}", i + 1))
        .collect();
    format!(
        "CREATE FUNCTION {name}({}) RETURNS TABLE ({}) LANGUAGE plpgsql VOLATILE {SETTINGS} AS $leasehold_fn$\n\
         #variable_conflict use_column\n\
         BEGIN\n    RETURN QUERY {sql};\nEND\n$leasehold_fn$",
        signature.join(", "),
        columns.join(", ")
    )
}

/// A type as SQL writes it (`int8`, `text[]`).
fn sql_type(t: &Type) -> String {
    match t.kind() {
        Kind::Array(element) => format!("{}[]", element.name()),
        _ => t.name().to_owned(),
    }
}
