//! `--growth N1,N2,...`: the first run alone at several sizes, alternated
//! in one invocation, for issue 29's growth targets: documents per second
//! at the last size at least 0.8 x the first size's, and peak RSS at most
//! 1.2 x.
//!
//! Why a mode of its own: two separate invocations of the bench compare two
//! states of the machine. Whichever runs second starts while the file system
//! still pays for the other's cleanup (ext4 skips recently deleted inodes
//! one by one when it allocates, see the bench's doc comment). On the
//! machine of issue 29, first runs of a million documents measured that way
//! came out 0.79-0.80 x the 100k's, where first runs alternated by hand gave
//! 0.92-0.93 x and this mode 0.93 x. Here every round runs each size once,
//! in the order given, each into a data directory of its own, and nothing
//! is deleted until the last run has been measured.

use std::path::Path;

use super::{leasehold_run, median, remove_added, Args, Cost, Summary};
use crate::common::tree::{ensure_tree, vocabulary, SEED};

/// The first runs of one size, one a round.
struct SizeRuns {
    docs: usize,
    runs: Vec<(Cost, Summary)>,
}

impl SizeRuns {
    /// The median first run, seconds.
    fn wall(&self) -> f64 {
        median(self.runs.iter().map(|(c, _)| c.wall).collect())
    }

    /// Documents per second of the median first run, so that the two
    /// columns agree whatever the number of rounds.
    fn docs_per_s(&self) -> f64 {
        self.docs as f64 / self.wall()
    }

    /// The largest process's peak RSS, bytes (the pool's extraction
    /// children included).
    fn peak_rss(&self) -> f64 {
        median(self.runs.iter().map(|(c, _)| c.peak_rss as f64).collect())
    }

    /// The main process's peak, as `run` reports it.
    fn main_peak(&self) -> f64 {
        median(
            self.runs
                .iter()
                .map(|(_, s)| s.peak_memory_bytes as f64)
                .collect(),
        )
    }
}

/// Generates (or reuses, under `--keep`) a tree of each `--growth` size,
/// then `--rounds` rounds of one first run a size into fresh directories
/// below `scratch`, and prints the figures against the first size's.
pub(super) fn measure_growth(args: &Args, scratch: &Path) {
    let vocab = vocabulary(SEED);
    let trees: Vec<_> = args
        .growth
        .iter()
        .map(|&n| {
            let tree = args
                .keep
                .as_deref()
                .unwrap_or(scratch)
                .join(format!("tree-{n}-{SEED}"));
            ensure_tree(&tree, n, &vocab);
            // What an interrupted invocation of the usual mode left in a
            // kept tree would be indexed too.
            remove_added(&tree);
            tree
        })
        .collect();
    let mut measured: Vec<SizeRuns> = args
        .growth
        .iter()
        .map(|&docs| SizeRuns {
            docs,
            runs: Vec::new(),
        })
        .collect();
    for r in 0..args.rounds {
        for (i, (size, tree)) in measured.iter_mut().zip(&trees).enumerate() {
            // The position as well as the size: a size given twice gets
            // directories of its own.
            let dir = scratch.join(format!("growth{i}-{}-{r}", size.docs));
            std::fs::create_dir_all(&dir).expect("a run directory");
            let (cost, summary) = leasehold_run(tree, &dir, "first");
            assert_eq!(
                summary.indexed as usize, size.docs,
                "the first run indexes every document"
            );
            eprintln!(
                "round {}: {} documents: {:.2} s, {:.0} docs/s",
                r + 1,
                size.docs,
                cost.wall,
                size.docs as f64 / cost.wall
            );
            size.runs.push((cost, summary));
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&growth_json(&measured, args.rounds)).expect("JSON")
        );
    } else {
        print_growth(&measured, args.rounds);
    }
}

fn growth_json(sizes: &[SizeRuns], rounds: usize) -> serde_json::Value {
    let first = &sizes[0];
    let sizes: Vec<_> = sizes
        .iter()
        .map(|s| {
            serde_json::json!({
                "docs": s.docs,
                "first_run_s": s.wall(),
                "docs_per_s": s.docs_per_s(),
                "peak_rss_bytes": s.peak_rss(),
                "main_peak_bytes": s.main_peak(),
                "docs_per_s_ratio": s.docs_per_s() / first.docs_per_s(),
                "peak_rss_ratio": s.peak_rss() / first.peak_rss(),
                "rounds_s": s.runs.iter().map(|(c, _)| c.wall).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({ "mode": "growth", "seed": SEED, "rounds": rounds, "sizes": sizes })
}

fn print_growth(sizes: &[SizeRuns], rounds: usize) {
    let first = &sizes[0];
    let mb = |b: f64| b / 1e6;
    println!("scale bench, growth: first runs alternated, {rounds} round(s) (medians), seed {SEED}");
    println!(
        "| documents | first run | docs/s (x the {}'s; target for the last >= 0.8 x) | peak RSS (x; target <= 1.2 x) | main process |",
        first.docs
    );
    println!("|---|---|---|---|---|");
    for s in sizes {
        let walls: Vec<String> = s.runs.iter().map(|(c, _)| format!("{:.2}", c.wall)).collect();
        println!(
            "| {} | {:.2} s (rounds {}) | {:.0} ({:.2} x) | {:.0} MB ({:.2} x) | {:.0} MB |",
            s.docs,
            s.wall(),
            walls.join(", "),
            s.docs_per_s(),
            s.docs_per_s() / first.docs_per_s(),
            mb(s.peak_rss()),
            s.peak_rss() / first.peak_rss(),
            mb(s.main_peak()),
        );
    }
}
