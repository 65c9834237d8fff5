//! Least-squares line through points, and how well it fits (R²): HNLB's
//! condition (iii), the utilization linear in the offered rate.

use serde::Serialize;

/// y = intercept + slope * x over `n` points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinearFit {
    pub intercept: f64,
    pub slope: f64,
    /// 1 - (residual sum of squares) / (total sum of squares); 1 is a
    /// perfect line.
    pub r2: f64,
    pub n: usize,
}

/// The fit through `points`; None with fewer than 3 points (two always
/// fit), x all equal, or y all equal (R² is undefined).
pub fn linear_fit(points: &[(f64, f64)]) -> Option<LinearFit> {
    let n = points.len();
    if n < 3 {
        return None;
    }
    let k = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / k;
    let my = points.iter().map(|p| p.1).sum::<f64>() / k;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let residual: f64 = points
        .iter()
        .map(|p| (p.1 - intercept - slope * p.0).powi(2))
        .sum();
    Some(LinearFit {
        intercept,
        slope,
        r2: 1.0 - residual / syy,
        n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_fits_exactly() {
        let f = linear_fit(&[(1.0, 3.0), (2.0, 5.0), (4.0, 9.0)]).unwrap();
        assert!((f.slope - 2.0).abs() < 1e-12 && (f.intercept - 1.0).abs() < 1e-12);
        assert!((f.r2 - 1.0).abs() < 1e-12);
        assert_eq!(f.n, 3);
    }

    #[test]
    fn r2_matches_a_hand_computed_case() {
        // x 1..4, y 1,3,2,4: slope 0.8, intercept 0.5, SSres 1.8, SStot 5.
        let f = linear_fit(&[(1.0, 1.0), (2.0, 3.0), (3.0, 2.0), (4.0, 4.0)]).unwrap();
        assert!((f.slope - 0.8).abs() < 1e-12);
        assert!((f.intercept - 0.5).abs() < 1e-12);
        assert!((f.r2 - 0.64).abs() < 1e-12);
    }

    #[test]
    fn degenerate_inputs_have_no_fit() {
        assert!(linear_fit(&[(1.0, 1.0), (2.0, 2.0)]).is_none());
        assert!(linear_fit(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]).is_none());
        assert!(linear_fit(&[(1.0, 2.0), (2.0, 2.0), (3.0, 2.0)]).is_none());
    }
}
