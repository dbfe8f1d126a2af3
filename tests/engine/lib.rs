//! Nothing: this package is its test binary (`main.rs`).
