//! `leasehold auth status` and `leasehold auth unlock`.

use std::process::ExitCode;

use super::config::Config;
use super::error::CliError;
use leasehold::clock::rfc3339;
use leasehold::config::Day;
use leasehold::store::{GateState, OutboxTotals};

/// One account, as `auth status` shows it.
#[derive(Debug, serde::Serialize)]
struct AccountLine {
    name: String,
    state: GateState,
    locked_until: Option<String>,
    epoch: i64,
    probes: i64,
    last_error: Option<String>,
    holders: i64,
    expires_on: Option<String>,
    days_left: Option<i64>,
}

#[derive(Debug, serde::Serialize)]
struct AuthStatus {
    accounts: Vec<AccountLine>,
    outbox: OutboxTotals,
}

/// `leasehold auth status`.
pub fn status(cfg: &Config, json: bool) -> Result<ExitCode, CliError> {
    let states = cfg.store.accounts().states()?;
    let today = Day::from_millis(cfg.store.now());
    let mut names: Vec<String> = cfg
        .upstream
        .iter()
        .flat_map(|u| u.file.accounts.iter().map(|a| a.name.clone()))
        .collect();
    for s in &states {
        if !names.contains(&s.name) {
            names.push(s.name.clone());
        }
    }
    let accounts = names
        .into_iter()
        .map(|name| {
            let s = states.iter().find(|s| s.name == name);
            let expires = cfg
                .upstream
                .as_ref()
                .and_then(|u| u.file.account(&name))
                .and_then(|a| a.expires_on);
            AccountLine {
                state: s.map_or(GateState::Open, |s| s.state),
                locked_until: s.and_then(|s| s.locked_until).map(rfc3339),
                epoch: s.map_or(0, |s| s.epoch),
                probes: s.map_or(0, |s| s.probes),
                last_error: s.and_then(|s| s.last_error.clone()),
                holders: s.map_or(0, |s| s.holders),
                expires_on: expires.map(|d| d.to_string()),
                days_left: expires.map(|d| d.0 - today.0),
                name,
            }
        })
        .collect();
    let report = AuthStatus {
        accounts,
        outbox: cfg.store.outbox().totals()?,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        print_status(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(r: &AuthStatus) {
    if r.accounts.is_empty() {
        println!("no accounts configured");
    }
    for a in &r.accounts {
        let mut line = format!("{}: {}", a.name, a.state);
        if let Some(u) = &a.locked_until {
            line += &format!(" until {u}");
        }
        line += &format!(
            ", epoch {}, {} probe(s), {} holder(s)",
            a.epoch, a.probes, a.holders
        );
        if let (Some(on), Some(left)) = (&a.expires_on, a.days_left) {
            line += &format!(", expires {on} ({left} day(s) left)");
        }
        if let Some(e) = &a.last_error {
            line += &format!("; last error: {e}");
        }
        println!("{line}");
    }
    let o = &r.outbox;
    println!(
        "outbox: {} result(s) waiting ({} bytes), {} dropped ({} bytes), {} delivered",
        o.rows, o.bytes, o.dropped, o.dropped_bytes, o.delivered
    );
}

/// `leasehold auth unlock ACCOUNT`.
pub fn unlock(cfg: &Config, account: &str) -> Result<ExitCode, CliError> {
    let known = cfg.store.accounts().states()?.iter().any(|s| s.name == account)
        || cfg
            .upstream
            .as_ref()
            .is_some_and(|u| u.file.account(account).is_some());
    if !known {
        return Err(CliError::Config(format!(
            "auth unlock: no account named {account:?}"
        )));
    }
    let by = format!("auth unlock (pid {})", std::process::id());
    let opened = cfg.store.accounts().unlock(account, &by)?;
    if let Some(up) = &cfg.upstream {
        up.gate.send_notices();
    }
    if opened {
        println!("{account}: unlocked");
    } else {
        println!("{account}: was not locked");
    }
    Ok(ExitCode::SUCCESS)
}
