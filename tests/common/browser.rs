//! A real headless browser for the report's test: Chromium's headless shell
//! from the distribution's packages, installed here (apt-get, as root) when
//! it is missing, so the test runs everywhere the suite runs and is never
//! skipped. `.ci/run` installs it beforehand the same way.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The programs that can take a screenshot headless, in order of preference.
const PROGRAMS: [&str; 3] = ["chromium-headless-shell", "chromium", "chromium-browser"];

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
}

fn find() -> Option<PathBuf> {
    PROGRAMS.iter().find_map(|p| on_path(p))
}

/// The browser, installed first if it is missing. Panics (the test fails,
/// never skips) when it cannot be had.
pub fn chromium() -> &'static Path {
    static FOUND: OnceLock<PathBuf> = OnceLock::new();
    FOUND.get_or_init(|| {
        if let Some(found) = find() {
            return found;
        }
        for args in [
            &["update", "-q"][..],
            &["install", "-y", "-q", "chromium-headless-shell"],
        ] {
            let status = Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdout(Stdio::null())
                .status()
                .expect("apt-get runs (the report's browser test installs Chromium with it)");
            assert!(
                status.success(),
                "apt-get {args:?} failed: the browser test needs chromium-headless-shell"
            );
        }
        find().expect("chromium-headless-shell installed but not on PATH")
    })
}

/// Run the browser headless on `page` with `args`; nothing outside the
/// machine can be reached (every host name fails to resolve).
pub fn run(page: &Path, args: &[&str]) -> std::process::Output {
    Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg("--host-resolver-rules=MAP * ~NOTFOUND")
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run the browser")
}

/// An 8-bit RGB or RGBA PNG (what Chromium writes) as rows of RGB pixels.
pub fn decode_png(bytes: &[u8]) -> (usize, usize, Vec<[u8; 3]>) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut width, mut height, mut channels) = (0usize, 0usize, 0usize);
    let mut data = Vec::new();
    let mut at = 8;
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let body = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(body[4..8].try_into().unwrap()) as usize;
                assert_eq!(body[8], 8, "8-bit samples");
                channels = match body[9] {
                    2 => 3,
                    6 => 4,
                    other => panic!("PNG colour type {other}"),
                };
                assert_eq!(body[12], 0, "not interlaced");
            }
            b"IDAT" => data.extend_from_slice(body),
            _ => {}
        }
        at += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&data[..])
        .read_to_end(&mut raw)
        .unwrap();
    let stride = width * channels;
    let mut pixels = Vec::with_capacity(width * height);
    let mut prev = vec![0u8; stride];
    for row in raw.chunks(stride + 1).take(height) {
        let (filter, line) = (row[0], &row[1..]);
        let mut out = vec![0u8; stride];
        for i in 0..stride {
            let a = if i >= channels {
                out[i - channels] as i16
            } else {
                0
            };
            let b = prev[i] as i16;
            let c = if i >= channels {
                prev[i - channels] as i16
            } else {
                0
            };
            let predictor = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => (a + b) / 2,
                4 => {
                    let p = a + b - c;
                    let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("PNG filter {other}"),
            };
            out[i] = line[i].wrapping_add(predictor as u8);
        }
        pixels.extend(out.chunks(channels).map(|p| [p[0], p[1], p[2]]));
        prev = out;
    }
    (width, height, pixels)
}
