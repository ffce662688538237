//! Reciprocal Rank Fusion: merges ranked lists of chunk ids (BM25, vector, …) into one
//! ranking by rank alone, so scores of different scales never need calibrating. A pure
//! function: no I/O, no index, no model.

use std::collections::HashMap;

/// The usual RRF constant (Cormack et al. 2009): large enough that rank 1 and rank 2 of
/// one list do not outweigh agreement between lists.
pub const DEFAULT_K: f64 = 60.0;

/// One retriever's results.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedList {
    /// The retriever, for explanations (`"bm25"`, `"vector"`).
    pub name: &'static str,
    /// How much this list counts; 1.0 for an unweighted fusion.
    pub weight: f64,
    /// `(chunk_id, retriever score)`, best first.
    pub hits: Vec<(u64, f32)>,
}

/// One fused result, with where it stood in each input list (same order as the input).
#[derive(Debug, Clone, PartialEq)]
pub struct FusedHit {
    pub id: u64,
    /// Σ over the lists that contain the id of `weight / (k + rank)`.
    pub score: f64,
    /// 1-based rank in each list; `None` where the list lacks the id.
    pub ranks: Vec<Option<usize>>,
    /// The retriever's own score in each list; `None` where the list lacks the id.
    pub scores: Vec<Option<f32>>,
}

/// Fuses `lists` and returns the best `limit` ids by RRF score. Ties are broken by the
/// best rank the id reached in any list, then by the smaller id, so the output is fully
/// deterministic. An id repeated within one list counts at its first (best) rank only.
/// `k` below zero is treated as zero.
pub fn reciprocal_rank_fusion(lists: &[RankedList], k: f64, limit: usize) -> Vec<FusedHit> {
    let k = k.max(0.0);
    let mut fused: HashMap<u64, FusedHit> = HashMap::new();
    for (list_index, list) in lists.iter().enumerate() {
        for (position, &(id, score)) in list.hits.iter().enumerate() {
            let hit = fused.entry(id).or_insert_with(|| FusedHit {
                id,
                score: 0.0,
                ranks: vec![None; lists.len()],
                scores: vec![None; lists.len()],
            });
            if hit.ranks[list_index].is_some() {
                continue;
            }
            let rank = position + 1;
            hit.ranks[list_index] = Some(rank);
            hit.scores[list_index] = Some(score);
        }
    }
    let mut hits: Vec<FusedHit> = fused.into_values().collect();
    for hit in &mut hits {
        // Summed in list order, so equal inputs give bit-identical scores.
        hit.score = hit
            .ranks
            .iter()
            .zip(lists)
            .filter_map(|(rank, list)| rank.map(|rank| list.weight / (k + rank as f64)))
            .sum();
    }
    hits.sort_unstable_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| best_rank(a).cmp(&best_rank(b)))
            .then_with(|| a.id.cmp(&b.id))
    });
    hits.truncate(limit);
    hits
}

fn best_rank(hit: &FusedHit) -> usize {
    hit.ranks
        .iter()
        .flatten()
        .copied()
        .min()
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(name: &'static str, weight: f64, ids: &[u64]) -> RankedList {
        RankedList {
            name,
            weight,
            hits: ids.iter().map(|&id| (id, 100.0 - id as f32)).collect(),
        }
    }

    fn ids_and_scores(hits: &[FusedHit]) -> Vec<(u64, f64)> {
        hits.iter().map(|hit| (hit.id, hit.score)).collect()
    }

    fn assert_close(actual: &[(u64, f64)], expected: &[(u64, f64)]) {
        assert_eq!(actual.len(), expected.len(), "{actual:?}");
        for ((id, score), (expected_id, expected_score)) in actual.iter().zip(expected) {
            assert_eq!(id, expected_id, "{actual:?}");
            assert!(
                (score - expected_score).abs() < 1e-12,
                "{id}: {score} vs {expected_score}"
            );
        }
    }

    #[test]
    fn agreement_between_lists_wins() {
        // bm25: 10, 20, 30; vector: 20, 40, 10; k = 60.
        // 20: 1/62 + 1/61 = 0.032522475; 10: 1/61 + 1/63 = 0.032266459;
        // 40: 1/62 = 0.016129032; 30: 1/63 = 0.015873016.
        let lists = [
            list("bm25", 1.0, &[10, 20, 30]),
            list("vector", 1.0, &[20, 40, 10]),
        ];
        let fused = reciprocal_rank_fusion(&lists, DEFAULT_K, 10);
        assert_close(
            &ids_and_scores(&fused),
            &[
                (20, 0.032_522_474_881_015_34),
                (10, 0.032_266_458_495_966_69),
                (40, 0.016_129_032_258_064_516),
                (30, 0.015_873_015_873_015_872),
            ],
        );
        assert_eq!(fused[0].ranks, [Some(2), Some(1)]);
        assert_eq!(fused[0].scores, [Some(80.0), Some(80.0)]);
        assert_eq!(fused[2].ranks, [None, Some(2)]);
        assert_eq!(fused[2].scores, [None, Some(60.0)]);
    }

    #[test]
    fn weights_scale_each_list() {
        // bm25 (1.0): 1, 2; vector (0.5): 2, 3.
        // 2: 1/62 + 0.5/61 = 0.024325754; 1: 1/61 = 0.016393443; 3: 0.5/62 = 0.008064516.
        let lists = [list("bm25", 1.0, &[1, 2]), list("vector", 0.5, &[2, 3])];
        let fused = reciprocal_rank_fusion(&lists, 60.0, 10);
        assert_close(
            &ids_and_scores(&fused),
            &[
                (2, 0.024_325_753_569_539_928),
                (1, 0.016_393_442_622_950_82),
                (3, 0.008_064_516_129_032_258),
            ],
        );
    }

    #[test]
    fn ties_break_by_best_rank_then_id() {
        // Same score, same best rank: smaller id first.
        let mirrored = [list("a", 1.0, &[2, 1]), list("b", 1.0, &[1, 2])];
        let fused = reciprocal_rank_fusion(&mirrored, 60.0, 10);
        assert_eq!(fused.iter().map(|h| h.id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(fused[0].score, fused[1].score);
        // k = 0 keeps the arithmetic exact: a: 7 → 1, 8 → 1/2; b (weight 2): 9 → 2,
        // 6 → 1, 5 → 2/3, 4 → 1/2. Scores 1 (7 at rank 1, 6 at rank 2) and 1/2 (8 at
        // rank 2, 4 at rank 4) tie; the better best rank goes first.
        let weighted = [list("a", 1.0, &[7, 8]), list("b", 2.0, &[9, 6, 5, 4])];
        let fused = reciprocal_rank_fusion(&weighted, 0.0, 10);
        assert_eq!(
            ids_and_scores(&fused),
            [
                (9, 2.0),
                (7, 1.0),
                (6, 1.0),
                (5, 2.0 / 3.0),
                (8, 0.5),
                (4, 0.5)
            ]
        );
    }

    #[test]
    fn limit_truncates_and_empty_inputs_give_nothing() {
        let lists = [list("bm25", 1.0, &[1, 2, 3, 4]), list("vector", 1.0, &[])];
        assert_eq!(reciprocal_rank_fusion(&lists, 60.0, 2).len(), 2);
        assert!(reciprocal_rank_fusion(&lists, 60.0, 0).is_empty());
        assert!(reciprocal_rank_fusion(&[], 60.0, 10).is_empty());
        let fused = reciprocal_rank_fusion(&lists, 60.0, 10);
        assert!(fused
            .iter()
            .all(|hit| hit.ranks.len() == 2 && hit.ranks[1].is_none()));
    }

    #[test]
    fn a_repeated_id_counts_once_at_its_best_rank() {
        let lists = [list("bm25", 1.0, &[5, 6, 5])];
        let fused = reciprocal_rank_fusion(&lists, 60.0, 10);
        assert_close(&ids_and_scores(&fused), &[(5, 1.0 / 61.0), (6, 1.0 / 62.0)]);
        assert_eq!(fused[0].ranks, [Some(1)]);
    }
}
