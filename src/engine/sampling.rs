//! Choosing the next token from logits: repetition penalty, greedy or temperature
//! sampling with top-k and top-p, reproducible for a given seed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::types::SamplingParams;

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    /// Reused between steps: (token, weight) candidates.
    candidates: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = match params.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        Self {
            params,
            rng,
            candidates: Vec::new(),
        }
    }

    /// Picks a token. `logits` may be changed in place; `recent` are the tokens generated
    /// so far (for the repetition penalty). Tokens at -inf are never chosen.
    pub fn sample(&mut self, logits: &mut [f32], recent: &[u32]) -> Option<u32> {
        self.penalise_repeats(logits, recent);
        if self.params.temperature <= 0.0 {
            return argmax(logits);
        }
        let temperature = self.params.temperature;
        self.candidates.clear();
        self.candidates.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| (i as u32, l / temperature)),
        );
        if self.candidates.is_empty() {
            return None;
        }
        let top_k = if self.params.top_k == 0 {
            self.candidates.len()
        } else {
            self.params.top_k.min(self.candidates.len())
        };
        if top_k < self.candidates.len() {
            self.candidates
                .select_nth_unstable_by(top_k - 1, |a, b| b.1.total_cmp(&a.1));
            self.candidates.truncate(top_k);
        }
        self.candidates
            .sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let max = self.candidates[0].1;
        let mut total = 0.0f32;
        for candidate in &mut self.candidates {
            candidate.1 = (candidate.1 - max).exp();
            total += candidate.1;
        }
        // Keep the smallest prefix whose probability reaches top_p.
        let mut kept = 0.0f32;
        let mut cut = self.candidates.len();
        for (i, candidate) in self.candidates.iter().enumerate() {
            kept += candidate.1 / total;
            if kept >= self.params.top_p {
                cut = i + 1;
                break;
            }
        }
        self.candidates.truncate(cut);
        let kept_total: f32 = self.candidates.iter().map(|c| c.1).sum();
        let mut point = self.rng.random::<f32>() * kept_total;
        for candidate in &self.candidates {
            point -= candidate.1;
            if point <= 0.0 {
                return Some(candidate.0);
            }
        }
        self.candidates.last().map(|c| c.0)
    }

    fn penalise_repeats(&self, logits: &mut [f32], recent: &[u32]) {
        let penalty = self.params.repetition_penalty;
        if penalty == 1.0 || recent.is_empty() {
            return;
        }
        let window = &recent[recent.len().saturating_sub(self.params.repetition_window)..];
        let mut seen = std::collections::HashSet::with_capacity(window.len());
        for &token in window {
            if !seen.insert(token) {
                continue;
            }
            if let Some(logit) = logits.get_mut(token as usize) {
                *logit = if *logit > 0.0 {
                    *logit / penalty
                } else {
                    *logit * penalty
                };
            }
        }
    }
}

/// The index of the largest finite logit (lowest index on ties).
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_finite() && best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature,
            seed: Some(seed),
            repetition_penalty: 1.0,
            ..SamplingParams::default()
        }
    }

    #[test]
    fn greedy_picks_the_largest_allowed_logit() {
        let mut sampler = Sampler::new(params(0.0, 1));
        let mut logits = vec![1.0, f32::NEG_INFINITY, 3.0, 2.0];
        assert_eq!(sampler.sample(&mut logits, &[]), Some(2));
    }

    #[test]
    fn same_seed_same_tokens() {
        let draw = |seed| {
            let mut sampler = Sampler::new(params(1.0, seed));
            (0..20)
                .map(|_| {
                    sampler
                        .sample(&mut vec![0.5, 0.4, 0.3, 0.2, 0.1], &[])
                        .unwrap()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn masked_tokens_are_never_sampled() {
        let mut sampler = Sampler::new(params(2.0, 3));
        for _ in 0..200 {
            let mut logits = vec![f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 0.0];
            let token = sampler.sample(&mut logits, &[]).unwrap();
            assert!(token == 1 || token == 3);
        }
    }

    #[test]
    fn repetition_penalty_lowers_seen_tokens() {
        let mut sampler = Sampler::new(SamplingParams {
            repetition_penalty: 2.0,
            ..params(0.0, 1)
        });
        let mut logits = vec![1.0, 0.9];
        assert_eq!(sampler.sample(&mut logits, &[0]), Some(1));
    }
}
