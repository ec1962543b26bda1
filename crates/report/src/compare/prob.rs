//! The two distributions `compare`'s test needs: the normal CDF (noise known from many
//! samples) and Student's t CDF (noise estimated from a few repeated runs, where the normal
//! would be too sure). Written out here rather than pulled from a statistics crate: two
//! functions, checked against tabulated values in the tests.

/// The standard normal CDF, Φ(x), from `erfc` (absolute error below 1e-7).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// The complementary error function (W. J. Cody's rational Chebyshev fit as given in
/// Numerical Recipes, `erfcc`: fractional error below 1.2e-7 everywhere).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Student's t CDF with `df` degrees of freedom; `None` (or a huge `df`) is the normal.
pub fn t_cdf(x: f64, df: Option<f64>) -> f64 {
    let Some(df) = df.filter(|d| d.is_finite() && *d < 1e6) else {
        return normal_cdf(x);
    };
    if x.is_nan() {
        return 0.5;
    }
    if x.is_infinite() {
        return if x > 0.0 { 1.0 } else { 0.0 };
    }
    let df = df.max(1e-9);
    // P(|T| > |x|) = I_{df/(df+x²)}(df/2, 1/2).
    let tail = inc_beta(df / 2.0, 0.5, df / (df + x * x));
    if x >= 0.0 {
        1.0 - 0.5 * tail
    } else {
        0.5 * tail
    }
}

/// The regularized incomplete beta function I_x(a, b) (continued fraction, Numerical Recipes
/// `betai`/`betacf`).
fn inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 3e-14 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut s = G[0];
    for (i, g) in G.iter().enumerate().skip(1) {
        s += g / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + s.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_and_t_match_tables() {
        let close = |a: f64, b: f64| (a - b).abs() < 2e-6;
        assert!(close(normal_cdf(0.0), 0.5));
        assert!(close(normal_cdf(1.959_964), 0.975));
        assert!(close(normal_cdf(-2.326_348), 0.01));
        // t tables: t(0.975; 1) = 12.706, t(0.95; 4) = 2.132, t(0.99; 10) = 2.764.
        assert!((t_cdf(12.706, Some(1.0)) - 0.975).abs() < 1e-4);
        assert!((t_cdf(2.132, Some(4.0)) - 0.95).abs() < 1e-4);
        assert!((t_cdf(-2.764, Some(10.0)) - 0.01).abs() < 1e-4);
        assert!(close(t_cdf(1.5, None), normal_cdf(1.5)));
        assert!(close(t_cdf(0.0, Some(3.0)), 0.5));
        assert_eq!(t_cdf(f64::INFINITY, Some(2.0)), 1.0);
    }
}
