//! Mailboxes (mbox): each message is a document of its own, keyed below its
//! mailbox (`fables.mbox/2.eml`), read as an e-mail with its attachments; a
//! mailbox that grows queues only its new messages, one that shrinks loses
//! the messages it no longer holds, and a message that fails costs the others
//! nothing.

use std::path::{Path, PathBuf};

use crate::common::output::{ok, stdout};
use crate::common::{leasehold, run_json as run};

/// A mailbox written by Python's `mailbox` module: three of Doug Sauder's
/// test messages (Eudora and Outlook, Latin-1 quoted-printable, attachments)
/// and one with a body line the writer escaped (`>From the quay`).
fn fixture() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fables.mbox")).unwrap()
}

/// `docs/mail/fables.mbox`, beside files whose names sort around the
/// mailbox's messages (`-` and ` ` before the separator, `e` after).
fn corpus(dir: &Path) -> (PathBuf, PathBuf) {
    let mail = dir.join("docs/mail");
    std::fs::create_dir_all(&mail).unwrap();
    std::fs::write(mail.join("fables.mbox"), fixture()).unwrap();
    for neighbour in ["fables.mbox-old.txt", "fables.mbox copy.txt", "fables.mboxes.txt"] {
        std::fs::write(mail.join(neighbour), format!("the neighbour {neighbour}\n")).unwrap();
    }
    (dir.join("docs"), mail.join("fables.mbox"))
}

fn figures(summary: &serde_json::Value) -> [u64; 5] {
    ["new", "changed", "unchanged", "gone", "indexed"].map(|k| summary[k].as_u64().unwrap_or(u64::MAX))
}

#[test]
fn each_message_of_a_mailbox_is_a_document() {
    let dir = tempfile::tempdir().unwrap();
    let (docs, _) = corpus(dir.path());
    let data = dir.path().join("data");
    let summary = run(&data, &docs, &[]);
    assert_eq!(figures(&summary), [7, 0, 0, 0, 7], "{summary}");
    assert_eq!(summary["dead"], 0, "{summary}");

    // Search names the mailbox's path and the message in it.
    let found = |query: &str| stdout(&ok(leasehold(&data, &["search", "-l", query])));
    let mailbox = docs.join("mail/fables.mbox");
    let message = |n: u32| format!("{}/{n}.eml", mailbox.display());
    assert!(found("Tortoise").lines().any(|l| l == message(1)));
    assert_eq!(found("\"Hasen klagten einst\"").trim(), message(2));
    assert_eq!(found("\"From the quay\"").trim(), message(4));
    assert_eq!(found("neighbour").lines().count(), 3);
    let outlook = stdout(&ok(leasehold(&data, &["show", "mail/fables.mbox/3.eml"])));
    assert!(
        outlook.contains("Subject: Test message from Microsoft Outlook 00"),
        "{outlook}"
    );
    assert!(
        outlook.contains("[attachment: "),
        "attachments are named: {outlook}"
    );
    let inspect = stdout(&ok(leasehold(&data, &["inspect", "mail/fables.mbox/4.eml"])));
    assert!(inspect.contains("Tide tables for the lighthouse"), "{inspect}");
    assert!(inspect.contains("Harbour Master"), "{inspect}");

    let again = run(&data, &docs, &[]);
    assert_eq!(figures(&again), [0, 0, 7, 0, 0], "{again}");
}

#[test]
fn a_mailbox_that_changes_queues_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let (docs, mailbox) = corpus(dir.path());
    let data = dir.path().join("data");
    run(&data, &docs, &[]);

    // Appended as a writer appends: after the blank line that ends the last message.
    let mut grown = fixture();
    grown.extend_from_slice(
        b"From ann@example.org Sun Nov  2 10:00:00 2025\nFrom: Ann <ann@example.org>\n\
          Subject: Lantern oil\n\nThe lantern needs oil before the storm.\n",
    );
    std::fs::write(&mailbox, &grown).unwrap();
    let summary = run(&data, &docs, &[]);
    assert_eq!(figures(&summary), [1, 0, 7, 0, 1], "{summary}");
    let found = |query: &str| stdout(&ok(leasehold(&data, &["search", "-l", query])));
    let message = |n: u32| format!("{}/{n}.eml", mailbox.display());
    assert_eq!(found("lantern").trim(), message(5));

    // The first message deleted: the others move up one, the fifth is gone.
    let second = grown.windows(6).skip(1).position(|w| w == b"\nFrom ").unwrap() + 2;
    std::fs::write(&mailbox, &grown[second..]).unwrap();
    let summary = run(&data, &docs, &[]);
    assert_eq!(figures(&summary), [0, 4, 3, 1, 4], "{summary}");
    assert_eq!(found("lantern").trim(), message(4));
    assert!(!found("Tortoise").lines().any(|l| l == message(1)));

    // No longer a mailbox at all: its messages are gone, the file is a document.
    std::fs::write(&mailbox, b"Just notes about tortoises.\n").unwrap();
    let summary = run(&data, &docs, &[]);
    assert_eq!(figures(&summary), [1, 0, 3, 4, 1], "{summary}");
    assert_eq!(found("tortoises").trim(), mailbox.display().to_string());
}

#[test]
fn a_message_over_the_input_limit_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let mut mailbox = fixture();
    mailbox.extend_from_slice(b"\nFrom big@example.org Sun Nov  2 10:00:00 2025\nSubject: Big\n\n");
    mailbox.extend_from_slice(&b"ballast line of a very large message\n".repeat(40_000));
    mailbox.extend_from_slice(
        b"\nFrom last@example.org Sun Nov  2 11:00:00 2025\nSubject: After the big one\n\nsmall\n",
    );
    std::fs::write(docs.join("big.mbox"), &mailbox).unwrap();
    let data = dir.path().join("data");
    let summary = run(&data, &docs, &["--max-input", "1M"]);
    assert_eq!(
        (&summary["indexed"], &summary["dead"]),
        (&5.into(), &1.into()),
        "{summary}"
    );
    let failures = summary["failures"].to_string();
    assert!(failures.contains("big.mbox/5.eml"), "{failures}");
    assert!(failures.contains("input limit"), "{failures}");
    let found = stdout(&ok(leasehold(&data, &["search", "-l", "\"After the big one\""])));
    assert_eq!(found.trim(), format!("{}/6.eml", docs.join("big.mbox").display()));
}
