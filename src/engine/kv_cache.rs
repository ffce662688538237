//! A key/value cache that grows in place: appending a step writes into a preallocated
//! buffer instead of concatenating the whole cache (which made decode slow down as the
//! context grew), and truncating to a prefix is free, which is what prompt-prefix reuse
//! needs.

use candle_core::{Result, Tensor};

/// Positions added when the buffer must grow.
const GROWTH_STEP: usize = 512;
/// The sequence axis of `(batch, kv_heads, seq, head_dim)` tensors.
const SEQ_DIM: usize = 2;

pub struct KvCache {
    keys: Option<Tensor>,
    values: Option<Tensor>,
    len: usize,
    max_len: usize,
}

impl KvCache {
    pub fn new(max_len: usize) -> Self {
        Self {
            keys: None,
            values: None,
            len: 0,
            max_len,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Forgets every position from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends `(1, kv_heads, n, head_dim)` keys and values; returns views of the whole cache.
    pub fn append(&mut self, keys: &Tensor, values: &Tensor) -> Result<(Tensor, Tensor)> {
        let added = keys.dim(SEQ_DIM)?;
        let needed = self.len + added;
        if needed > self.max_len {
            candle_core::bail!("context window of {} tokens exceeded", self.max_len);
        }
        self.keys = Some(grow(
            self.keys.take(),
            keys,
            self.len,
            needed,
            self.max_len,
        )?);
        self.values = Some(grow(
            self.values.take(),
            values,
            self.len,
            needed,
            self.max_len,
        )?);
        let (Some(all_keys), Some(all_values)) = (&self.keys, &self.values) else {
            candle_core::bail!("kv cache buffers missing after growth");
        };
        all_keys.slice_set(&keys.contiguous()?, SEQ_DIM, self.len)?;
        all_values.slice_set(&values.contiguous()?, SEQ_DIM, self.len)?;
        self.len = needed;
        Ok((
            all_keys.narrow(SEQ_DIM, 0, self.len)?,
            all_values.narrow(SEQ_DIM, 0, self.len)?,
        ))
    }
}

/// Returns a buffer with room for `needed` positions holding the first `len` of `old`.
fn grow(
    old: Option<Tensor>,
    like: &Tensor,
    len: usize,
    needed: usize,
    max_len: usize,
) -> Result<Tensor> {
    if let Some(buffer) = &old {
        if buffer.dim(SEQ_DIM)? >= needed {
            return Ok(buffer.clone());
        }
    }
    let capacity = needed
        .div_ceil(GROWTH_STEP)
        .saturating_mul(GROWTH_STEP)
        .min(max_len);
    let (batch, heads, _, head_dim) = like.dims4()?;
    let buffer = Tensor::zeros(
        (batch, heads, capacity, head_dim),
        like.dtype(),
        like.device(),
    )?;
    if let (Some(old), true) = (old, len > 0) {
        buffer.slice_set(&old.narrow(SEQ_DIM, 0, len)?.contiguous()?, SEQ_DIM, 0)?;
    }
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn step(value: f32, n: usize) -> Tensor {
        (Tensor::ones((1, 2, n, 4), DType::F32, &Device::Cpu).unwrap() * value as f64).unwrap()
    }

    #[test]
    fn append_truncate_and_grow_keep_contents() {
        let mut cache = KvCache::new(2000);
        cache.append(&step(1.0, 3), &step(1.0, 3)).unwrap();
        cache.append(&step(2.0, 600), &step(2.0, 600)).unwrap();
        assert_eq!(cache.len(), 603);
        cache.truncate(2);
        let (k, _) = cache.append(&step(3.0, 1), &step(3.0, 1)).unwrap();
        let firsts: Vec<f32> = k
            .narrow(1, 0, 1)
            .unwrap()
            .narrow(3, 0, 1)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(firsts, vec![1.0, 1.0, 3.0]);
    }

    #[test]
    fn overflow_is_an_error() {
        let mut cache = KvCache::new(4);
        assert!(cache.append(&step(1.0, 5), &step(1.0, 5)).is_err());
    }
}
