//! Branch-free float functions whose loops vectorize (libm's are calls per element): the
//! exponential attention and SiLU use, and the error-function GELU of BERT encoders; and
//! `wide`, which compiles such loops for AVX-512 where the CPU has it.

/// Runs `f` compiled with AVX-512's instructions when the CPU has it, else for the build's
/// baseline. For loops that vectorize lane by lane (no reassociated float sums): they give
/// the same bits either way, in fewer instructions with AVX-512 (conversions, byte packing
/// and masked tails most), though LLVM may keep 256-bit vectors.
#[inline(always)]
pub fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
    {
        // SAFETY: the features were just detected.
        return unsafe { with_avx512(f) };
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `eˣ` to about 2 ulp, branch-free so loops over it vectorize (libm's `expf` does not).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.3, 88.7);
    let n = (x * LOG2E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    // exp(r) on |r| ≤ ln2/2 (Cephes' expf polynomial).
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let e = p * r * r + r + 1.0;
    // `n as i32` saturates, which compiles to a scalar conversion per lane with NaN and
    // range checks: it cost more than the rest of the function. `n` is within
    // −126..=128 for any number (NaN aside, which the bounds map into range, and `e`
    // stays NaN), so the unchecked conversion is exact and vectorizes.
    // SAFETY: the value is finite and within i32's range.
    let n = unsafe { n.max(-127.0).min(128.0).to_int_unchecked::<i32>() };
    let scale = f32::from_bits(((n + 127) as u32) << 23);
    e * scale
}

/// `erf(x)` to about 5·10⁻⁷ in f32 (Abramowitz & Stegun 7.1.26, 1.5·10⁻⁷ exact).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let mut p = 1.061_405_4f32;
    p = p * t - 1.453_152_1;
    p = p * t + 1.421_413_8;
    p = p * t - 0.284_496_74;
    p = p * t + 0.254_829_6;
    let y = 1.0 - p * t * exp(-a * a);
    y.copysign(x)
}

/// `x · Φ(x)` with the exact normal CDF, as BERT's `gelu` is defined.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_close_to_libm_over_the_range_attention_uses() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp(x), x.exp());
            assert!(
                ((got - want) / want).abs() < 4e-7,
                "exp({x}) = {got}, libm {want}"
            );
            x += 0.0137;
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) >= 0.0 && exp(-1000.0) < 1e-37);
        assert_eq!(exp(1000.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn erf_and_gelu_match_their_definitions() {
        // Reference erf from its Taylor series (exact enough on |x| ≤ 3 in f64).
        let reference = |x: f64| -> f64 {
            let (mut term, mut sum, mut n) = (x, x, 0.0);
            while term.abs() > 1e-17 {
                n += 1.0;
                term *= -x * x / n;
                sum += term / (2.0 * n + 1.0);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        };
        let mut x = -3.0f32;
        while x <= 3.0 {
            let want = reference(x as f64);
            assert!(
                (erf(x) as f64 - want).abs() < 6e-7,
                "erf({x}) = {}, want {want}",
                erf(x)
            );
            let g = gelu(x) as f64;
            let g_want = 0.5 * x as f64 * (1.0 + reference(x as f64 / 2f64.sqrt()));
            assert!((g - g_want).abs() < 1e-6, "gelu({x}) = {g}, want {g_want}");
            x += 0.0173;
        }
        assert_eq!(erf(10.0), 1.0);
        assert_eq!(erf(-10.0), -1.0);
        assert_eq!(gelu(0.0), 0.0);
    }
}
