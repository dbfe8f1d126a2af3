//! Reading what the binary printed, for tests that run it.

use std::process::Output;

/// Standard output as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The output of a run that must have succeeded; both streams in the message if not.
pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

/// The JSON document a successful run printed on standard output.
pub fn json(out: Output) -> serde_json::Value {
    serde_json::from_slice(&ok(out).stdout).expect("JSON on stdout")
}
