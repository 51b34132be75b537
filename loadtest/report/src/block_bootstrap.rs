//! The circular block bootstrap of a per-second series, for the difference of two runs'
//! figures.
//!
//! Seconds of a load test are not independent: a queue that builds in one second is
//! still there in the next, so a per-second latency or throughput series is
//! autocorrelated. Resampling single seconds as if they were independent (the iid
//! bootstrap) underestimates the variance of their mean, and its 95 % interval covers
//! the truth far less often than 95 % (the test below measures how often). Resampling
//! whole blocks of consecutive seconds keeps the dependence within a block.
//!
//! **Block length**: chosen from the series itself by the automatic rule of Politis and
//! White (2004; corrected by Patton, Politis and White, 2009) for the circular block
//! bootstrap of a mean: the autocovariances up to the lag where the autocorrelation
//! stops being significant, weighed by a flat-top window, give the length that balances
//! the variance estimate's bias against its variance (`b ∝ n^(1/3)`).
//!
//! **Assumptions**: each series is stationary over the seconds compared (the caller
//! passes a stage's steady state, not its ramp) and its dependence dies out within a
//! few blocks; two runs are independent of each other.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The seed every comparison resamples from: the same reports give the same answer.
pub const SEED: u64 = 0x0dd5_eed5;

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// The sample autocovariance at `lag` (divided by n, so the sequence is positive
/// semi-definite).
fn autocovariance(values: &[f64], lag: usize) -> f64 {
    let n = values.len();
    if lag >= n {
        return 0.0;
    }
    let m = mean(values);
    values
        .iter()
        .zip(&values[lag..])
        .map(|(a, b)| (a - m) * (b - m))
        .sum::<f64>()
        / n as f64
}

/// The flat-top lag window: 1 up to half the bandwidth, then falling linearly to 0.
fn flat_top(t: f64) -> f64 {
    let t = t.abs();
    if t <= 0.5 {
        1.0
    } else if t <= 1.0 {
        2.0 * (1.0 - t)
    } else {
        0.0
    }
}

/// The block length for the circular block bootstrap of the mean of `values`, at least
/// 1 and at most `min(3√n, n/3)`.
pub fn block_length(values: &[f64]) -> usize {
    block_estimate(values).length
}

/// A block length, and how much a block bootstrap's variance of the mean must be
/// scaled up to correct its bias: blocks cut the dependence between them, so the
/// resampled variance is about `(g − G/b) / n` where the truth is `g / n` (Künsch 1989;
/// `g` the sum of all autocovariances, `G` the sum weighed by lag, `b` the length).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockEstimate {
    pub length: usize,
    pub variance_correction: f64,
}

/// The scaling is bounded: beyond 4× the estimate itself is too rough to trust.
const MAX_VARIANCE_CORRECTION: f64 = 4.0;

/// [`block_length`] with its variance correction.
pub fn block_estimate(values: &[f64]) -> BlockEstimate {
    let plain = BlockEstimate {
        length: 1,
        variance_correction: 1.0,
    };
    let n = values.len();
    if n < 4 {
        return plain;
    }
    let nf = n as f64;
    let max_block = (3.0 * nf.sqrt()).min(nf / 3.0).ceil().max(1.0) as usize;
    let run = 5usize.max(nf.log10().sqrt().ceil() as usize);
    let max_lag = (nf.sqrt().ceil() as usize + run).min(n - 1);
    let variance = autocovariance(values, 0);
    if variance <= 0.0 {
        return plain;
    }
    let rho: Vec<f64> = (0..=max_lag)
        .map(|k| autocovariance(values, k) / variance)
        .collect();
    // The first lag after which `run` autocorrelations in a row are insignificant.
    let threshold = 2.0 * (nf.log10() / nf).sqrt();
    let insignificant_after = (0..=max_lag)
        .find(|&m| (1..=run).all(|k| rho.get(m + k).is_none_or(|r| r.abs() < threshold)))
        .unwrap_or(max_lag);
    let bandwidth = (2 * insignificant_after).clamp(1, max_lag);
    let (mut g, mut big_g) = (variance, 0.0);
    for k in 1..=bandwidth {
        let weighed = flat_top(k as f64 / bandwidth as f64) * autocovariance(values, k);
        g += 2.0 * weighed;
        big_g += 2.0 * k as f64 * weighed;
    }
    let d = 4.0 / 3.0 * g * g;
    if d <= 0.0 {
        return plain;
    }
    let length = ((2.0 * big_g * big_g / d).cbrt() * nf.cbrt()).round() as usize;
    let length = length.clamp(1, max_block);
    let resampled = g - big_g / length as f64;
    BlockEstimate {
        length,
        variance_correction: if resampled > 0.0 {
            (g / resampled).clamp(1.0, MAX_VARIANCE_CORRECTION)
        } else {
            MAX_VARIANCE_CORRECTION
        },
    }
}

/// Fills `drawn` with one circular block resample of `0..n`: blocks of `block`
/// consecutive indices from random starts, wrapping at the end, until `n` are drawn.
fn resample(n: usize, block: usize, rng: &mut StdRng, drawn: &mut Vec<usize>) {
    drawn.clear();
    while drawn.len() < n {
        let start = rng.random_range(0..n);
        let take = block.min(n - drawn.len());
        drawn.extend((start..start + take).map(|i| i % n));
    }
}

/// One run's side of a comparison: how many seconds it has, the block length to
/// resample them by, and its statistic of any selection of them (a mean of per-second
/// values, a percentile of the seconds' merged latencies).
/// A statistic of a selection of seconds (by their indices).
pub type Statistic<'a> = dyn Fn(&[usize]) -> f64 + 'a;

pub struct Side<'a> {
    pub seconds: usize,
    pub block: usize,
    /// The resampled statistics' spread around their mean is scaled by this (the
    /// square root of [`BlockEstimate::variance_correction`]).
    pub spread: f64,
    pub statistic: &'a Statistic<'a>,
}

/// B's statistic against A's: both estimates, the 95 % percentile intervals of the
/// difference B − A and of the relative difference (B − A) / A, and a two-sided
/// bootstrap p-value of "no difference".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Difference {
    pub a: f64,
    pub b: f64,
    pub interval: (f64, f64),
    /// `None` when A's statistic was 0 in a resample (no relative change of nothing).
    pub relative: Option<(f64, f64)>,
    /// Twice the smaller share of resampled differences on either side of 0.
    pub p_value: f64,
    pub blocks: (usize, usize),
}

/// The circular block bootstrap of B's statistic against A's, from [`SEED`]; the two
/// runs resampled independently.
pub fn difference(a: &Side, b: &Side, resamples: usize) -> Difference {
    let everything = |side: &Side| (side.statistic)(&(0..side.seconds).collect::<Vec<_>>());
    let drawn = draws(a, b, resamples);
    let mut absolute: Vec<f64> = drawn.iter().map(|(x, y)| y - x).collect();
    let mut relative = relative_draws(&drawn);
    let below = absolute.iter().filter(|d| **d <= 0.0).count();
    let above = absolute.iter().filter(|d| **d >= 0.0).count();
    let p_value = (2.0 * below.min(above) as f64 / resamples.max(1) as f64).min(1.0);
    Difference {
        a: everything(a),
        b: everything(b),
        interval: percentile_interval(&mut absolute),
        relative: (relative.len() == resamples).then(|| percentile_interval(&mut relative)),
        p_value,
        blocks: (a.block, b.block),
    }
}

/// The one-sided bootstrap p-value of "B's statistic moved from A's by no more than
/// `margin` (a share of A) in `margin`'s direction": the share of resampled relative
/// changes that stay on the allowed side of it (up to `margin` when it is positive,
/// down to it when negative). Small means B is beyond the margin. The same draws as
/// [`difference`] (same seed). `None` when A's statistic was 0 in a resample.
pub fn beyond_margin_p_value(a: &Side, b: &Side, resamples: usize, margin: f64) -> Option<f64> {
    let drawn = draws(a, b, resamples);
    let relative = relative_draws(&drawn);
    if relative.len() != resamples || resamples == 0 {
        return None;
    }
    let allowed = relative
        .iter()
        .filter(|r| {
            if margin >= 0.0 {
                **r <= margin
            } else {
                **r >= margin
            }
        })
        .count();
    Some(allowed as f64 / resamples as f64)
}

/// `resamples` pairs of (A's, B's) statistic, each side resampled by blocks on its own
/// and spread by its variance correction and small-sample widening.
fn draws(a: &Side, b: &Side, resamples: usize) -> Vec<(f64, f64)> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let (mut drawn_a, mut drawn_b) = (Vec::new(), Vec::new());
    let mut drawn: Vec<(f64, f64)> = (0..resamples)
        .map(|_| {
            resample(a.seconds, a.block, &mut rng, &mut drawn_a);
            resample(b.seconds, b.block, &mut rng, &mut drawn_b);
            ((a.statistic)(&drawn_a), (b.statistic)(&drawn_b))
        })
        .collect();
    // Each side's resampled statistics spread wider around their mean by its
    // correction: the block bootstrap's variance is biased low for dependent seconds.
    let centre = |pick: fn(&(f64, f64)) -> f64, drawn: &[(f64, f64)]| {
        drawn.iter().map(pick).sum::<f64>() / drawn.len().max(1) as f64
    };
    let (mean_x, mean_y) = (centre(|d| d.0, &drawn), centre(|d| d.1, &drawn));
    let (spread_a, spread_b) = (a.spread * small_sample(a), b.spread * small_sample(b));
    for (x, y) in &mut drawn {
        *x = mean_x + (*x - mean_x) * spread_a;
        *y = mean_y + (*y - mean_y) * spread_b;
    }
    drawn
}

/// (B − A) / A of each draw whose A is not 0.
fn relative_draws(drawn: &[(f64, f64)]) -> Vec<f64> {
    drawn
        .iter()
        .filter(|(x, _)| *x != 0.0)
        .map(|(x, y)| (y - x) / x)
        .collect()
}

/// How much wider a 95 % interval must be when its variance rests on few independent
/// pieces: Student's t over the normal quantile, with the side's blocks (n / b) less one
/// as its degrees of freedom (Cornish–Fisher expansion of t's quantile).
fn small_sample(side: &Side) -> f64 {
    const Z: f64 = 1.959_964;
    let df = (side.seconds as f64 / side.block.max(1) as f64 - 1.0).max(1.0);
    let t = Z
        + (Z.powi(3) + Z) / (4.0 * df)
        + (5.0 * Z.powi(5) + 16.0 * Z.powi(3) + 3.0 * Z) / (96.0 * df * df);
    t / Z
}

/// The 2.5th and 97.5th percentiles of at least one value.
fn percentile_interval(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let last = values.len().saturating_sub(1) as f64;
    let at = |q: f64| {
        values
            .get((last * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    (at(0.025), at(0.975))
}

/// The mean of the values at `indices`.
pub fn mean_at(values: &[f64], indices: &[usize]) -> f64 {
    indices.iter().map(|&i| values[i]).sum::<f64>() / indices.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A standard normal draw (Box–Muller).
    fn normal(rng: &mut StdRng) -> f64 {
        let u: f64 = 1.0 - rng.random::<f64>();
        let v: f64 = rng.random();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// `n` values of a stationary AR(1) series x_t = φ x_{t−1} + ε_t, ε ~ N(0, 1).
    fn ar1(phi: f64, n: usize, rng: &mut StdRng) -> Vec<f64> {
        let mut x = normal(rng) / (1.0 - phi * phi).sqrt();
        (0..n)
            .map(|_| {
                x = phi * x + normal(rng);
                x
            })
            .collect()
    }

    /// The interval of mean(b) − mean(a), resampled by `block`s (`None`: chosen from
    /// each series).
    fn mean_interval(a: &[f64], b: &[f64], block: Option<usize>) -> (f64, f64) {
        fn side<'a>(
            values: &[f64],
            block: Option<usize>,
            statistic: &'a dyn Fn(&[usize]) -> f64,
        ) -> Side<'a> {
            let estimate = block_estimate(values);
            Side {
                seconds: values.len(),
                block: block.unwrap_or(estimate.length),
                spread: if block.is_some() {
                    1.0
                } else {
                    estimate.variance_correction.sqrt()
                },
                statistic,
            }
        }
        let (stat_a, stat_b) = (|i: &[usize]| mean_at(a, i), |i: &[usize]| mean_at(b, i));
        difference(&side(a, block, &stat_a), &side(b, block, &stat_b), 500).interval
    }

    /// Written before it was run: two independent AR(1) series with φ = 0.6 (a
    /// throttled stage's per-second latency at its plateau here: lag-1 autocorrelation
    /// 0.46 for p50 and 0.63 for p99 in a quick-profile run; unthrottled plateaus are
    /// near 0, a ramp far above), 120 seconds each (a default-profile stage), the same
    /// mean; 1,000 simulations from a fixed seed. The interval of the difference should
    /// hold 0 in 95 % of them.
    #[test]
    #[ignore = "needs a minute in a debug build: 1,000 simulations (run by .ci/run, in release)"]
    fn the_block_interval_covers_95_percent_of_an_autocorrelated_series() {
        const SIMULATIONS: usize = 1_000;
        let mut rng = StdRng::seed_from_u64(20_261_207);
        let (mut iid, mut block) = (0, 0);
        for _ in 0..SIMULATIONS {
            let a = ar1(0.6, 120, &mut rng);
            let b = ar1(0.6, 120, &mut rng);
            let (low, high) = mean_interval(&a, &b, Some(1));
            iid += usize::from(low <= 0.0 && 0.0 <= high);
            let (low, high) = mean_interval(&a, &b, None);
            block += usize::from(low <= 0.0 && 0.0 <= high);
        }
        let share = |covered: usize| covered as f64 / SIMULATIONS as f64;
        eprintln!("coverage: iid {}, block {}", share(iid), share(block));
        assert!(share(iid) < 0.85, "the iid interval: {}", share(iid));
        assert!(
            (0.92..=0.98).contains(&share(block)),
            "the block interval: {}",
            share(block)
        );
    }

    /// Held out: written after the variance correction and the t widening were chosen
    /// on φ = 0.6, n = 120 above (where they took coverage from 0.885 to 0.926), before
    /// these were run. First run: φ 0.3, n 300: 0.933; φ 0, n 60: 0.948; φ 0.8, n 90:
    /// 0.868 — a miss: strong dependence over few seconds leaves few independent blocks,
    /// and the interval is too narrow there.
    #[test]
    #[ignore = "needs a minute in a debug build: 1,200 simulations (run by .ci/run, in release)"]
    fn the_block_interval_on_series_it_was_not_tuned_on() {
        let coverage = |phi: f64, n: usize, seed: u64| {
            let mut rng = StdRng::seed_from_u64(seed);
            let covered = (0..400)
                .filter(|_| {
                    let (a, b) = (ar1(phi, n, &mut rng), ar1(phi, n, &mut rng));
                    let (low, high) = mean_interval(&a, &b, None);
                    low <= 0.0 && 0.0 <= high
                })
                .count();
            covered as f64 / 400.0
        };
        for (phi, n, seed) in [(0.3, 300, 11), (0.0, 60, 13)] {
            let share = coverage(phi, n, seed);
            assert!((0.92..=0.98).contains(&share), "phi {phi}, n {n}: {share}");
        }
        let miss = coverage(0.8, 90, 12);
        assert!((0.80..0.92).contains(&miss), "the known miss moved: {miss}");
    }

    #[test]
    fn a_change_beyond_the_margin_has_a_small_p_value_and_one_within_a_large_one() {
        let mut rng = StdRng::seed_from_u64(3);
        let around = |level: f64, rng: &mut StdRng| -> Vec<f64> {
            ar1(0.3, 60, rng)
                .into_iter()
                .map(|x| level + 5.0 * x)
                .collect()
        };
        let (a, b, same) = (
            around(100.0, &mut rng),
            around(130.0, &mut rng),
            around(100.0, &mut rng),
        );
        fn side<'a>(values: &[f64], statistic: &'a dyn Fn(&[usize]) -> f64) -> Side<'a> {
            Side {
                seconds: values.len(),
                block: block_length(values),
                spread: 1.0,
                statistic,
            }
        }
        let stat_a = |i: &[usize]| mean_at(&a, i);
        let stat_b = |i: &[usize]| mean_at(&b, i);
        let stat_same = |i: &[usize]| mean_at(&same, i);
        let (side_a, side_b, side_same) = (
            side(&a, &stat_a),
            side(&b, &stat_b),
            side(&same, &stat_same),
        );
        let p = |b: &Side, margin| beyond_margin_p_value(&side_a, b, 1000, margin).expect("p");
        assert!(
            p(&side_b, 0.10) < 0.01,
            "+30 % is beyond +10 %: {}",
            p(&side_b, 0.10)
        );
        assert!(
            p(&side_b, 0.50) > 0.99,
            "+30 % is within +50 %: {}",
            p(&side_b, 0.50)
        );
        assert!(p(&side_same, 0.10) > 0.9, "no change is within +10 %");
        // A fall: within -5 % for B above A, beyond it for A against B.
        assert!(p(&side_b, -0.05) > 0.99);
        let fell = beyond_margin_p_value(&side_b, &side_a, 1000, -0.05).expect("p");
        assert!(fell < 0.01, "-23 % is beyond -5 %: {fell}");
    }

    #[test]
    fn independent_seconds_get_short_blocks_and_dependent_ones_longer() {
        let mut rng = StdRng::seed_from_u64(7);
        let white = ar1(0.0, 240, &mut rng);
        let dependent = ar1(0.8, 240, &mut rng);
        assert!(block_length(&white) <= 2, "{}", block_length(&white));
        assert!(
            block_length(&dependent) >= 5,
            "{}",
            block_length(&dependent)
        );
        assert_eq!(block_length(&[3.0; 50]), 1, "no variance");
        assert_eq!(block_length(&[1.0, 2.0]), 1);
    }
}
