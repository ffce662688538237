//! What the decoders' tests compare against on the real default model: candle's llama run
//! in float on the whole sequence, and llama.cpp's logits for the same GGUF and prompt
//! (`tests/data/logits_reference.json`).

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama;

pub fn model_path() -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "{} is missing: run models/fetch",
        path.display()
    );
    path
}

/// A chat prompt of the default model, in its token ids.
pub const TOKENS: [u32; 37] = [
    1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407,
    19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531,
    198,
];

pub fn top_k(logits: &[f32], k: usize) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    ids.truncate(k);
    ids
}

/// The last position's logits from candle's llama with every weight dequantized and no
/// activation quantization: the most exact answer candle gives. candle reads the switch
/// once per thread, so this runs on a new one.
pub fn float_logits(tokens: &[u32]) -> Vec<f32> {
    let tokens = tokens.to_vec();
    std::thread::spawn(move || {
        unsafe { std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1") };
        let mut file = std::fs::File::open(model_path()).unwrap();
        let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
        let mut reference =
            quantized_llama::ModelWeights::from_gguf(content, &mut file, &Device::Cpu).unwrap();
        let input = Tensor::new(tokens.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        reference
            .forward(&input, 0)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    })
    .join()
    .unwrap()
}

pub fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max)
}

/// llama.cpp's prompt and its top-10 logits.
pub struct LlamaCpp {
    pub prompt: Vec<u32>,
    top_ids: Vec<u32>,
    top_logits: Vec<f32>,
}

impl LlamaCpp {
    pub fn load() -> Self {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/logits_reference.json");
        let reference: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        let ids = |key: &str| -> Vec<u32> {
            reference[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect()
        };
        Self {
            prompt: ids("prompt_ids"),
            top_ids: ids("top_ids"),
            top_logits: reference["top_logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect(),
        }
    }

    /// Same best token, llama.cpp's top-10 logits within a small tolerance, and at least
    /// eight of its ten best tokens among ours (greedy text is not compared: near-ties).
    pub fn check(&self, logits: &[f32]) {
        assert_eq!(
            top_k(logits, 1)[0] as u32,
            self.top_ids[0],
            "best token differs from llama.cpp"
        );
        for (id, expected) in self.top_ids.iter().zip(&self.top_logits) {
            let got = logits[*id as usize];
            assert!(
                (got - expected).abs() < 0.75,
                "token {id}: ours {got}, llama.cpp {expected}"
            );
        }
        let ours: Vec<u32> = top_k(logits, 10).into_iter().map(|i| i as u32).collect();
        let shared = ours.iter().filter(|id| self.top_ids.contains(id)).count();
        assert!(
            shared >= 8,
            "top-10 sets share only {shared}: ours {ours:?}, llama.cpp {:?}",
            self.top_ids
        );
    }
}
