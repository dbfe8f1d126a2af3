//! The scale bench's tree of documents, which the serve bench searches too:
//! N small text documents of a made-up vocabulary drawn from a
//! Zipf-Mandelbrot law, in a two-level tree, deterministic from a seed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The generator's seed: the same N gives the same tree on every machine.
pub const SEED: u64 = 29;
/// Distinct words the documents draw from.
const VOCABULARY: usize = 50_000;
/// Documents per leaf directory.
const FILES_PER_LEAF: usize = 100;

/// A made-up vocabulary: distinct pronounceable words, shortest first, so
/// that Zipf's most frequent words are the short ones, as in a language.
pub fn vocabulary(seed: u64) -> Vec<String> {
    const ONSETS: [&str; 20] = [
        "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "st", "tr",
        "sh",
    ];
    const VOWELS: [&str; 8] = ["a", "e", "i", "o", "u", "ai", "ea", "ou"];
    const CODAS: [&str; 6] = ["", "", "n", "r", "s", "t"];
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut seen = HashSet::new();
    let mut words = Vec::with_capacity(VOCABULARY);
    while words.len() < VOCABULARY {
        let syllables = 1 + rng.usize(0..4);
        let mut w = String::new();
        for _ in 0..syllables {
            w.push_str(ONSETS[rng.usize(..ONSETS.len())]);
            w.push_str(VOWELS[rng.usize(..VOWELS.len())]);
            w.push_str(CODAS[rng.usize(..CODAS.len())]);
        }
        if seen.insert(w.clone()) {
            words.push(w);
        }
    }
    words.sort_by_key(String::len);
    words
}

/// Draws word ranks from a Zipf-Mandelbrot law (exponent 1.07, offset 2.7,
/// close to English text), by binary search in the cumulative weights.
pub struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize) -> Zipf {
        let mut sum = 0.0;
        let cumulative = (0..n)
            .map(|r| {
                sum += 1.0 / (r as f64 + 2.7).powf(1.07);
                sum
            })
            .collect();
        Zipf { cumulative }
    }

    pub fn sample(&self, rng: &mut fastrand::Rng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let u = rng.f64() * total;
        self.cumulative
            .partition_point(|&c| c < u)
            .min(self.cumulative.len() - 1)
    }
}

/// One document's text: 40-300 words in sentences of 5-20 words.
pub fn document(rng: &mut fastrand::Rng, zipf: &Zipf, vocab: &[String]) -> String {
    let words = rng.usize(40..=300);
    let mut text = String::with_capacity(words * 8);
    let mut left_in_sentence = 0;
    for i in 0..words {
        let w = &vocab[zipf.sample(rng)];
        if left_in_sentence == 0 {
            if i > 0 {
                text.push_str(if rng.usize(0..4) == 0 { ".\n" } else { ". " });
            }
            left_in_sentence = rng.usize(5..=20);
            let mut c = w.chars();
            text.extend(c.next().map(|f| f.to_ascii_uppercase()));
            text.push_str(c.as_str());
        } else {
            text.push(' ');
            text.push_str(w);
        }
        left_in_sentence -= 1;
    }
    text.push_str(".\n");
    text
}

/// Document `i`'s path below the tree: about [`FILES_PER_LEAF`] files per
/// leaf directory, leaves spread over a square-ish two-level tree.
pub fn doc_path(tree: &Path, n: usize, i: usize) -> PathBuf {
    let leaves = n.div_ceil(FILES_PER_LEAF);
    let per_top = (leaves as f64).sqrt().ceil() as usize;
    let leaf = i / FILES_PER_LEAF;
    tree.join(format!("d{:03}", leaf / per_top))
        .join(format!("s{:03}", leaf % per_top))
        .join(format!("doc{i:07}.txt"))
}

/// Generates the tree unless a complete one is there (its marker names N
/// and the seed); true when it generated.
pub fn ensure_tree(tree: &Path, n: usize, vocab: &[String]) -> bool {
    let marker = tree.join(".complete");
    let expected = format!("{n} {SEED}\n");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == expected) {
        eprintln!("scale bench: reusing {}", tree.display());
        return false;
    }
    let _ = std::fs::remove_dir_all(tree);
    eprintln!("scale bench: generating {n} documents in {}", tree.display());
    let zipf = Zipf::new(vocab.len());
    let mut rng = fastrand::Rng::with_seed(SEED);
    for i in 0..n {
        let path = doc_path(tree, n, i);
        if i % FILES_PER_LEAF == 0 {
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("a leaf directory");
        }
        std::fs::write(&path, document(&mut rng, &zipf, vocab)).expect("a document");
    }
    // The marker is a dot file: `leasehold run` and the walks skip or count it
    // alike, and `run` does not take hidden files by default.
    std::fs::write(&marker, expected).expect("the tree's marker");
    true
}
