//! The step scheduler against a scripted model (the real default model's tokenizer and
//! template, logits that always pick one ordinary token): which prompt parts each pass
//! runs, when a prompt waits to copy a shared prefix, and cancellation during prefill.

use std::sync::{Arc, Mutex};

use super::*;
use crate::engine::gguf::GgufFile;
use crate::engine::models::reference::model_path;
use crate::engine::types::{ChatMessage, ResponseFormat, Role, SamplingParams};
use crate::engine::worker::tokenizer_and_template;

/// `(slot, tokens, position)` of each part of one pass.
type Pass = Vec<(usize, usize, usize)>;

#[derive(Default)]
struct Log {
    passes: Vec<Pass>,
    /// `(from, to, len)` of each prefix copy.
    copies: Vec<(usize, usize, usize)>,
}

struct Scripted {
    vocab: usize,
    token: u32,
    slots: usize,
    log: Arc<Mutex<Log>>,
}

impl CausalLm for Scripted {
    fn forward(&mut self, _: &[u32], _: usize) -> candle_core::Result<candle_core::Tensor> {
        candle_core::bail!("the scheduler calls forward_batch")
    }
    fn truncate_cache(&mut self, _: usize) -> bool {
        true
    }
    fn context_length(&self) -> usize {
        4096
    }
    fn slots(&self) -> usize {
        self.slots
    }
    fn set_slots(&mut self, slots: usize) -> usize {
        self.slots = slots;
        slots
    }
    fn forward_batch(
        &mut self,
        steps: &[(usize, &[u32], usize)],
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let pass = steps.iter().map(|&(s, t, p)| (s, t.len(), p)).collect();
        self.log.lock().unwrap().passes.push(pass);
        let mut logits = vec![0.0; self.vocab];
        logits[self.token as usize] = 10.0;
        Ok(vec![logits; steps.len()])
    }
    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> bool {
        self.log.lock().unwrap().copies.push((from, to, len));
        true
    }
    fn truncate_slot(&mut self, _: usize, _: usize) -> bool {
        true
    }
}

fn runtime(slots: usize) -> (ChatRuntime, Arc<Mutex<Log>>) {
    let path = model_path();
    let gguf = GgufFile::open(&path).unwrap();
    let (tokenizer, template) = tokenizer_and_template(&gguf, &path).unwrap();
    let token = tokenizer.encode(" ok", false).unwrap()[0];
    let log = Arc::new(Mutex::new(Log::default()));
    let model = Scripted {
        vocab: tokenizer.vocab_size(),
        token,
        slots,
        log: log.clone(),
    };
    let runtime = ChatRuntime::new(
        Box::new(model),
        tokenizer,
        template,
        OutputLimits::default(),
    )
    .unwrap();
    (runtime, log)
}

fn request(system: &str, user: &str, max_tokens: usize) -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::new(Role::System, system),
            ChatMessage::new(Role::User, user),
        ],
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        max_tokens: Some(max_tokens),
        ..ChatRequest::default()
    }
}

/// Steps `sequences` once, with every emitted event accepted.
fn step(runtime: &mut ChatRuntime, sequences: &mut [Sequence], cancels: &[AtomicBool]) {
    let mut emits: Vec<Box<Emit>> = sequences
        .iter()
        .map(|_| Box::new(|_| true) as Box<Emit>)
        .collect();
    let mut batch: Vec<(&mut Sequence, &mut Emit, &AtomicBool)> = sequences
        .iter_mut()
        .zip(emits.iter_mut())
        .zip(cancels)
        .map(|((s, e), c)| (s, &mut **e, c))
        .collect();
    runtime.step(&mut batch).unwrap();
}

fn last_pass(log: &Arc<Mutex<Log>>) -> Pass {
    log.lock()
        .unwrap()
        .passes
        .last()
        .cloned()
        .unwrap_or_default()
}

const SYSTEM: &str = "You are Warden, the on-call assistant of a closed network. \
    Answer from the runbooks, cite them, and never run a change without confirmation.";

#[test]
fn a_prompt_waits_one_pass_to_copy_a_shared_system_prompt() {
    let (mut runtime, log) = runtime(4);
    runtime.set_slots(4);
    let system = SYSTEM.repeat(3);
    let a = runtime
        .start(&request(&system, "Why is the disk full?", 4))
        .unwrap();
    let b = runtime
        .start(&request(&system, "How do I restart nginx?", 4))
        .unwrap();
    let (a_len, b_len) = (a.prompt.len(), b.prompt.len());
    let shared = common_prefix(&a.prompt, &b.prompt);
    assert!(shared >= 64, "the prompts share only {shared} tokens");
    let (a_slot, b_slot) = (a.slot, b.slot);
    let mut sequences = vec![a, b];
    let cancels = [AtomicBool::new(false), AtomicBool::new(false)];

    step(&mut runtime, &mut sequences, &cancels);
    assert_eq!(
        last_pass(&log),
        vec![(a_slot, a_len, 0)],
        "b waits for a's prefix"
    );
    assert!(!sequences[0].finished() && !sequences[0].prefilling);

    step(&mut runtime, &mut sequences, &cancels);
    assert_eq!(
        log.lock().unwrap().copies,
        vec![(a_slot, b_slot, shared)],
        "b copies the shared prefix"
    );
    assert_eq!(
        last_pass(&log),
        vec![(a_slot, 1, a_len), (b_slot, b_len - shared, shared)],
        "a decodes while b prefills only its own tail"
    );
    assert_eq!(sequences[1].reused, shared);
}

#[test]
fn a_long_prompt_is_prefilled_in_chunks_while_others_keep_decoding() {
    let (mut runtime, log) = runtime(2);
    runtime.set_slots(2);
    let a = runtime.start(&request("Be brief.", "Status?", 64)).unwrap();
    let mut sequences = vec![a];
    let mut cancels = vec![AtomicBool::new(false)];
    step(&mut runtime, &mut sequences, &cancels);
    let long = "disk usage on the log volume went from 40 to 97 percent overnight; ".repeat(80);
    let b = runtime
        .start(&request("Reply with one line.", &long, 4))
        .unwrap();
    let (a_slot, b_slot, b_len) = (sequences[0].slot, b.slot, b.prompt.len());
    assert!(
        b_len > 2 * PREFILL_CHUNK,
        "the long prompt has only {b_len} tokens"
    );
    let reused = b.reused;
    sequences.push(b);
    cancels.push(AtomicBool::new(false));

    let mut prefilled = reused;
    while sequences[1].prefilling {
        step(&mut runtime, &mut sequences, &cancels);
        let pass = last_pass(&log);
        assert_eq!(pass[0].0, a_slot, "a decodes in every pass");
        assert_eq!(pass[0].1, 1);
        let (slot, tokens, position) = pass[1];
        assert_eq!((slot, position), (b_slot, prefilled));
        assert!(tokens <= PREFILL_CHUNK, "a pass ran {tokens} prompt tokens");
        prefilled += tokens;
        assert_eq!(!sequences[1].next.is_empty(), prefilled == b_len);
    }
    assert_eq!(prefilled, b_len);
    step(&mut runtime, &mut sequences, &cancels);
    let pass = last_pass(&log);
    assert_eq!((pass[0].0, pass[0].1), (a_slot, 1));
    assert_eq!(pass[1], (b_slot, 1, b_len), "b decodes its first token");
}

#[test]
fn cancelling_during_prefill_ends_the_request_with_an_error() {
    let (mut runtime, log) = runtime(1);
    let a = runtime.start(&request("Be brief.", "Status?", 8)).unwrap();
    let mut sequences = vec![a];
    let cancels = [AtomicBool::new(true)];
    step(&mut runtime, &mut sequences, &cancels);
    assert!(
        log.lock().unwrap().passes.is_empty(),
        "a cancelled prompt is not run"
    );
    assert!(sequences[0].finished());
    let a = sequences.remove(0);
    let err = runtime.finish(a, &mut |_| true).unwrap_err();
    assert!(err.to_string().contains("cancelled"), "{err}");
    assert!(runtime.has_free_slot(), "the slot is free again");
}

/// Tokens the grammar forces are taken without a pass of their own: those before a free
/// choice run together in the next pass as one part, those that end the output run in
/// none, and the text is what the schema fixes.
#[test]
fn tokens_the_grammar_forces_run_together_in_one_pass() {
    let (mut runtime, log) = runtime(1);
    let status = "acknowledged by the on-call engineer";
    let mut constant = request("Be brief.", "Status?", 64);
    constant.response_format = ResponseFormat::JsonSchema(serde_json::json!({
        "type": "object",
        "properties": {
            "status": {"const": status},
            "note": {"type": "string", "maxLength": 12}
        },
        "required": ["status", "note"],
        "additionalProperties": false
    }));
    let mut sequences = vec![runtime.start(&constant).unwrap()];
    let cancels = [AtomicBool::new(false)];
    let mut steps = 0;
    while !sequences[0].finished() && steps < 64 {
        step(&mut runtime, &mut sequences, &cancels);
        steps += 1;
    }
    let a = sequences.remove(0);
    let generated = a.generated.len();
    let text = a.stream.text().to_owned();
    let summary = runtime.finish(a, &mut |_| true).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["status"], status, "{text}");
    assert!(value["note"].is_string(), "{text}");
    assert_eq!(summary.completion_tokens, generated);
    assert_eq!(summary.finish_reason, FinishReason::Stop);
    let passes = log.lock().unwrap().passes.clone();
    assert!(
        passes.len() < generated,
        "{} passes for {generated} tokens",
        passes.len()
    );
    assert!(
        passes[1..].iter().any(|pass| pass[0].1 > 1),
        "no pass ran forced tokens together: {passes:?}"
    );
}
