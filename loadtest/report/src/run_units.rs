//! Runs as the units of a comparison: when `tune --repeat` gave each side several runs
//! of a stage, each run's steady-state figure is one observation, and the runs' spread
//! — which holds whatever moves between runs on this machine (CPU frequency,
//! neighbours, caches), not only the seconds' noise within one run — is the noise.
//!
//! **The test** is Welch's t on the runs' values (unequal variances, Welch–Satterthwaite
//! degrees of freedom). Its assumption: each side's run values are independent draws
//! from a distribution close enough to normal for a t interval at a few runs; with 2 or
//! 3 runs a side the interval is wide, which is the honest answer. No floor is set by
//! hand: a difference is significant when the runs say so.

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::block_bootstrap::Difference;

/// Fewest runs a side needs to be compared run by run.
pub const MIN_RUNS: usize = 2;

/// Mean and unbiased variance.
fn moments(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance)
}

/// The t statistic's standard error and degrees of freedom of `b − scale · a`
/// (Welch–Satterthwaite), or `None` when neither side varies.
fn welch_terms(a: &[f64], b: &[f64], scale: f64) -> Option<(f64, f64)> {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (_, va) = moments(a);
    let (_, vb) = moments(b);
    let (ta, tb) = (scale * scale * va / na, vb / nb);
    let se2 = ta + tb;
    if se2 <= 0.0 || !se2.is_finite() {
        return None;
    }
    let df = se2 * se2 / (ta * ta / (na - 1.0) + tb * tb / (nb - 1.0));
    Some((se2.sqrt(), df))
}

fn students_t(df: f64) -> Option<StudentsT> {
    StudentsT::new(0.0, 1.0, df).ok()
}

/// B's runs against A's: the means, the 95 % Welch interval of B − A (and as a share
/// of A's mean), and the two-sided p-value of "no difference". `blocks` holds the runs
/// per side. `None` with fewer than [`MIN_RUNS`] a side, or when no run differs from
/// its side's others yet the sides differ: then the runs measure no noise to test
/// against (a percentile the histograms round alike in every run, say), and no
/// verdict is honest. Runs that all agree, on both sides alike, differ by nothing.
pub fn difference(a: &[f64], b: &[f64]) -> Option<Difference> {
    if a.len() < MIN_RUNS || b.len() < MIN_RUNS {
        return None;
    }
    let ((mean_a, _), (mean_b, _)) = (moments(a), moments(b));
    let d = mean_b - mean_a;
    let (interval, p_value) = match welch_terms(a, b, 1.0) {
        Some((se, df)) => {
            let t = students_t(df)?;
            let q = t.inverse_cdf(0.975);
            let p = 2.0 * (1.0 - t.cdf((d / se).abs()));
            ((d - q * se, d + q * se), p.clamp(0.0, 1.0))
        }
        None if d == 0.0 => ((0.0, 0.0), 1.0),
        None => return None,
    };
    Some(Difference {
        a: mean_a,
        b: mean_b,
        interval,
        relative: (mean_a != 0.0).then(|| (interval.0 / mean_a, interval.1 / mean_a)),
        p_value,
        blocks: (a.len(), b.len()),
    })
}

/// The one-sided p-value of "B's mean moved from A's by no more than `margin` (a share
/// of A's mean) in its direction": Welch's t on `b − (1 + margin) · a`. Small means B is
/// beyond the margin. `None` with fewer than [`MIN_RUNS`] a side.
pub fn beyond_margin_p_value(a: &[f64], b: &[f64], margin: f64) -> Option<f64> {
    if a.len() < MIN_RUNS || b.len() < MIN_RUNS {
        return None;
    }
    let scale = 1.0 + margin;
    let excess = moments(b).0 - scale * moments(a).0;
    let Some((se, df)) = welch_terms(a, b, scale) else {
        let beyond = if margin >= 0.0 {
            excess > 0.0
        } else {
            excess < 0.0
        };
        return Some(if beyond { 0.0 } else { 1.0 });
    };
    let t = students_t(df)?;
    let upper = 1.0 - t.cdf(excess / se);
    Some(if margin >= 0.0 { upper } else { 1.0 - upper }.clamp(0.0, 1.0))
}

/// The machine's between-run noise of a figure, from a report with repeats that the
/// user pointed to (`compare --noise-from RUN`): its spread as a share of its level
/// (the coefficient of variation of the runs' values) and the degrees of freedom it
/// rests on. Assumed: the noise scales with the figure's level and is the same on both
/// sides and in the run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordedNoise {
    pub relative_sd: f64,
    pub df: f64,
}

impl RecordedNoise {
    /// From the runs' values of one figure; `None` with fewer than [`MIN_RUNS`] or a
    /// level of 0.
    pub fn of(runs: &[f64]) -> Option<Self> {
        if runs.len() < MIN_RUNS {
            return None;
        }
        let (mean, variance) = moments(runs);
        (mean != 0.0).then(|| Self {
            relative_sd: variance.sqrt() / mean.abs(),
            df: runs.len() as f64 - 1.0,
        })
    }

    /// `d` (one run a side, its interval from the seconds) widened by this noise on both
    /// sides: the standard error is the bootstrap's (its interval's half width over
    /// 1.96) and each side's between-run variance added; the interval and two-sided
    /// p-value from Student's t on the noise's degrees of freedom. Returns the new
    /// difference and its standard error.
    pub fn widen(self, d: Difference) -> Option<(Difference, f64)> {
        let se_seconds = (d.interval.1 - d.interval.0) / (2.0 * 1.959_964);
        let (between_a, between_b) = (self.relative_sd * d.a, self.relative_sd * d.b);
        let se = (se_seconds.powi(2) + between_a.powi(2) + between_b.powi(2)).sqrt();
        let change = d.b - d.a;
        let t = students_t(self.df)?;
        let (interval, p_value) = if se > 0.0 {
            let q = t.inverse_cdf(0.975);
            let p = 2.0 * (1.0 - t.cdf((change / se).abs()));
            ((change - q * se, change + q * se), p.clamp(0.0, 1.0))
        } else {
            ((change, change), if change == 0.0 { 1.0 } else { 0.0 })
        };
        Some((
            Difference {
                interval,
                relative: (d.a != 0.0).then(|| (interval.0 / d.a, interval.1 / d.a)),
                p_value,
                ..d
            },
            se,
        ))
    }

    /// The one-sided p-value of "B moved from A by no more than `margin`" for a
    /// difference widened by [`Self::widen`] with standard error `se`.
    pub fn beyond_margin_p_value(self, d: &Difference, se: f64, margin: f64) -> Option<f64> {
        let excess = d.b - (1.0 + margin) * d.a;
        if se <= 0.0 {
            let beyond = if margin >= 0.0 {
                excess > 0.0
            } else {
                excess < 0.0
            };
            return Some(if beyond { 0.0 } else { 1.0 });
        }
        let upper = 1.0 - students_t(self.df)?.cdf(excess / se);
        Some(if margin >= 0.0 { upper } else { 1.0 - upper }.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welch_matches_a_worked_example() {
        // By hand from the definitions: means 20 and 23, variances 1 and 1, n 3 each:
        // se = sqrt(1/3 + 1/3) = 0.8165, t = 3.674, df = 4 (Welch–Satterthwaite).
        let a = [19.0, 20.0, 21.0];
        let b = [22.0, 23.0, 24.0];
        let d = difference(&a, &b).expect("difference");
        assert_eq!((d.a, d.b, d.blocks), (20.0, 23.0, (3, 3)));
        let t = StudentsT::new(0.0, 1.0, 4.0).expect("t");
        let expected = 2.0 * (1.0 - t.cdf(3.0 / 0.816_497));
        assert!(
            (d.p_value - expected).abs() < 1e-4,
            "{} vs {expected}",
            d.p_value
        );
        // Student's table: t 3.674 on 4 df lies between the 2.5 % (2.776) and 1 %
        // (3.747) one-sided points, so p is between 0.02 and 0.05.
        assert!((0.02..0.05).contains(&d.p_value), "{}", d.p_value);
        assert!(d.interval.0 > 0.0 && d.interval.1 < 6.0, "{:?}", d.interval);
        let (lo, hi) = d.relative.expect("relative");
        assert!(
            (lo - d.interval.0 / 20.0).abs() < 1e-12 && (hi - d.interval.1 / 20.0).abs() < 1e-12
        );
    }

    #[test]
    fn runs_that_overlap_are_not_different_and_one_run_is_not_enough() {
        let d = difference(&[100.0, 112.0, 95.0], &[104.0, 98.0, 110.0]).expect("difference");
        assert!(d.p_value > 0.5, "{}", d.p_value);
        assert!(difference(&[100.0], &[104.0, 98.0]).is_none());
        assert_eq!(
            difference(&[5.0, 5.0], &[5.0, 5.0]).map(|d| d.p_value),
            Some(1.0)
        );
    }

    #[test]
    fn recorded_noise_widens_a_difference_the_seconds_alone_call_significant() {
        // Within the run, +5 % looks sure (interval ±1 %); the machine's runs spread 4 %.
        let d = Difference {
            a: 100.0,
            b: 105.0,
            interval: (4.0, 6.0),
            relative: Some((0.04, 0.06)),
            p_value: 0.0,
            blocks: (3, 3),
        };
        let noise = RecordedNoise::of(&[96.0, 100.0, 104.0]).expect("noise");
        assert!((noise.relative_sd - 0.04).abs() < 1e-12 && noise.df == 2.0);
        let (wide, se) = noise.widen(d).expect("widened");
        assert!(wide.p_value > 0.3, "{}", wide.p_value);
        assert!(
            wide.interval.0 < 0.0 && wide.interval.1 > 10.0,
            "{:?}",
            wide.interval
        );
        assert!(se > 5.0, "{se}");
        // A gate at +10 % is not failed by +5 %.
        assert!(noise.beyond_margin_p_value(&wide, se, 0.10).expect("p") > 0.5);
        assert!(RecordedNoise::of(&[100.0]).is_none());
    }

    #[test]
    fn a_regression_gate_on_runs_needs_the_change_beyond_its_margin() {
        let a = [100.0, 102.0, 98.0];
        let up_30 = [130.0, 133.0, 127.0];
        assert!(beyond_margin_p_value(&a, &up_30, 0.10).expect("p") < 0.01);
        assert!(beyond_margin_p_value(&a, &up_30, 0.50).expect("p") > 0.99);
        // A fall gated at -5 %: B at -30 % is beyond it; B unchanged is not.
        assert!(beyond_margin_p_value(&up_30, &a, -0.05).expect("p") < 0.01);
        assert!(beyond_margin_p_value(&a, &a, -0.05).expect("p") > 0.9);
    }
}
