//! The generation loop of one chat model: prompt rendering and tokenization, prompt-prefix
//! KV reuse, chunked prefill, constrained sampling, stop conditions, streaming deltas.
//! Runs on the model's worker thread only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::chat_template::{ChatTemplate, PromptPiece};
use super::constrained::{Constraint, ConstraintFactory, OutputLimits, OutputShape};
use super::error::{EngineError, Result};
use super::models::CausalLm;
use super::sampling::Sampler;
use super::text_stream::{Pushed, TextStream};
use super::tokenizer::TextTokenizer;
use super::types::{ChatRequest, FinishReason, GenerationEvent, GenerationSummary, ToolChoice};

/// Prompt tokens run through the model per forward pass during prefill; bounds the size
/// of the attention score matrix for long prompts.
const PREFILL_CHUNK: usize = 512;

/// A loaded chat model with everything needed to serve requests.
pub struct ChatRuntime {
    model: Box<dyn CausalLm>,
    tokenizer: Arc<TextTokenizer>,
    template: ChatTemplate,
    constraints: ConstraintFactory,
    /// Tokens whose keys and values are in the model's cache, in order.
    cached: Vec<u32>,
}

/// Where generated events go; `false` means the receiver is gone.
pub type Emit<'a> = dyn FnMut(GenerationEvent) -> bool + 'a;

impl ChatRuntime {
    pub fn new(
        model: Box<dyn CausalLm>,
        tokenizer: Arc<TextTokenizer>,
        template: ChatTemplate,
        limits: OutputLimits,
    ) -> Result<Self> {
        let constraints = ConstraintFactory::new(tokenizer.clone(), limits)?;
        Ok(Self {
            model,
            tokenizer,
            template,
            constraints,
            cached: Vec::new(),
        })
    }

    pub fn context_length(&self) -> usize {
        self.model.context_length()
    }

    /// Forgets the cached prompt (after a failure the cache may be inconsistent).
    pub fn reset(&mut self) {
        self.cached.clear();
        self.model.truncate_cache(0);
    }

    /// Tokenizes the request's conversation as the model's template renders it.
    pub fn prompt_tokens(&self, request: &ChatRequest) -> Result<Vec<u32>> {
        let tools = if request.tool_choice == ToolChoice::None {
            &[][..]
        } else {
            &request.tools[..]
        };
        let mut tokens = Vec::new();
        if self.tokenizer.add_bos {
            tokens.extend(self.tokenizer.bos_id);
        }
        for piece in self.template.render(&request.messages, tools)? {
            match piece {
                PromptPiece::Template(text) => tokens.extend(self.tokenizer.encode(&text, true)?),
                PromptPiece::Content(text) => tokens.extend(self.tokenizer.encode(&text, false)?),
            }
        }
        if let Some(prefix) = request
            .assistant_prefix
            .as_deref()
            .filter(|p| !p.is_empty())
        {
            tokens.extend(self.tokenizer.encode(prefix, false)?);
        }
        Ok(tokens)
    }

    /// Runs one request to the end, sending deltas through `emit`.
    pub fn generate(
        &mut self,
        request: &ChatRequest,
        cancel: &AtomicBool,
        emit: &mut Emit,
    ) -> Result<GenerationSummary> {
        let shape = OutputShape::for_request(request)?;
        let mut constraint = self.constraints.constraint(&shape)?;
        let prompt = self.prompt_tokens(request)?;
        let context = self.model.context_length();
        if prompt.len() >= context {
            return Err(EngineError::ContextOverflow {
                prompt: prompt.len(),
                context,
            });
        }
        let max_new = request
            .max_tokens
            .unwrap_or(usize::MAX)
            .min(context - prompt.len());
        let started = Instant::now();
        let (mut logits, reused) = self.prefill(&prompt, cancel)?;
        let prefill_ms = started.elapsed().as_secs_f64() * 1e3;

        let decode_started = Instant::now();
        let mut sampler = Sampler::new(request.sampling.clone());
        let mut stream = TextStream::default();
        let mut generated: Vec<u32> = Vec::new();
        let mut deltas = DeltaGate::new(&shape);
        let mut finish = FinishReason::Length;
        while generated.len() < max_new {
            if cancel.load(Ordering::Relaxed) {
                finish = FinishReason::Cancelled;
                break;
            }
            if let Some(constraint) = constraint.as_mut() {
                constraint.mask(&mut logits)?;
            }
            let Some(token) = sampler.sample(&mut logits, &generated) else {
                return Err(EngineError::Inference("no token can be sampled".into()));
            };
            let grammar_done = advance(constraint.as_mut(), token)?;
            if self.tokenizer.is_eos(token) && !request.ignore_eos {
                finish = FinishReason::Stop;
                break;
            }
            generated.push(token);
            let bytes = if self.tokenizer.is_special(token) {
                &[][..]
            } else {
                self.tokenizer.token_bytes(token)
            };
            let stopped = match stream.push(bytes, &request.stop) {
                Pushed::Text(text) => !deltas.send(text, emit),
                Pushed::Stopped(text) => {
                    deltas.send(text, emit);
                    finish = FinishReason::Stop;
                    true
                }
            };
            let repeated_call =
                bytes.contains(&b'>') && shape.ends_with_repeated_call(stream.text());
            if stopped || grammar_done || repeated_call {
                if grammar_done || repeated_call {
                    finish = FinishReason::Stop;
                }
                break;
            }
            if generated.len() < max_new {
                logits = self.step(token)?;
            }
        }
        let tail = stream.finish();
        deltas.send(tail, emit);
        // A cut-off output (length, cancel) keeps its complete calls; one without any is
        // sent as text.
        let tool_calls = match shape.parse_tool_calls(stream.text()) {
            Ok(calls) => calls,
            Err(err) if finish == FinishReason::Stop => return Err(err),
            Err(_) => shape.complete_tool_calls(stream.text()),
        };
        if !tool_calls.is_empty() {
            finish = FinishReason::ToolCalls;
        } else {
            deltas.release_held(emit);
        }
        Ok(GenerationSummary {
            prompt_tokens: prompt.len(),
            cached_prompt_tokens: reused,
            completion_tokens: generated.len(),
            finish_reason: finish,
            tool_calls,
            prefill_ms,
            decode_ms: decode_started.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// Brings the cache to `prompt` and returns the logits after its last token, reusing
    /// the longest cached prefix. Returns how many prompt tokens were reused.
    fn prefill(&mut self, prompt: &[u32], cancel: &AtomicBool) -> Result<(Vec<f32>, usize)> {
        let common = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // At least one token must run to produce logits.
        let mut reused = common.min(prompt.len().saturating_sub(1));
        if !self.model.truncate_cache(reused) {
            self.model.truncate_cache(0);
            reused = 0;
        }
        self.cached.truncate(reused);
        let mut logits = None;
        for chunk in prompt[reused..].chunks(PREFILL_CHUNK) {
            if cancel.load(Ordering::Relaxed) {
                break;
            }
            logits = Some(self.run(chunk)?);
        }
        match logits {
            Some(logits) => Ok((logits, reused)),
            // Cancelled before any work: nothing to generate from.
            None => Err(EngineError::Inference("cancelled during prefill".into())),
        }
    }

    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.run(&[token])
    }

    fn run(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let position = self.cached.len();
        let result = self
            .model
            .forward(tokens, position)
            .and_then(|t| t.to_vec1::<f32>());
        match result {
            Ok(logits) => {
                self.cached.extend_from_slice(tokens);
                Ok(logits)
            }
            Err(err) => {
                self.reset();
                Err(err.into())
            }
        }
    }
}

/// Feeds a sampled token to the constraint; true when the grammar is now complete.
fn advance(constraint: Option<&mut Constraint>, token: u32) -> Result<bool> {
    match constraint {
        Some(c) => {
            c.advance(token)?;
            Ok(c.is_finished())
        }
        None => Ok(false),
    }
}

/// Decides which generated text is sent as content deltas: all of it for text and JSON,
/// none for forced tool calls, and for "auto" tool mode everything unless the output
/// opens a tool call (held until the first character shows which: the grammar lets calls
/// start only at the first character, and text never starts with `<`).
struct DeltaGate {
    mode: GateMode,
    held: String,
}

#[derive(PartialEq)]
enum GateMode {
    Pass,
    Suppress,
    Undecided,
}

impl DeltaGate {
    fn new(shape: &OutputShape) -> Self {
        let mode = match shape {
            OutputShape::ToolCalls { .. } => GateMode::Suppress,
            OutputShape::TextOrToolCalls { .. } => GateMode::Undecided,
            _ => GateMode::Pass,
        };
        Self {
            mode,
            held: String::new(),
        }
    }

    /// Returns false when the receiver is gone.
    fn send(&mut self, text: String, emit: &mut Emit) -> bool {
        if text.is_empty() {
            return true;
        }
        match self.mode {
            GateMode::Pass => emit(GenerationEvent::Delta(text)),
            GateMode::Suppress => {
                self.held.push_str(&text);
                true
            }
            GateMode::Undecided => {
                self.held.push_str(&text);
                match self.held.chars().next() {
                    None => true,
                    Some('<') => {
                        self.mode = GateMode::Suppress;
                        true
                    }
                    Some(_) => {
                        self.mode = GateMode::Pass;
                        emit(GenerationEvent::Delta(std::mem::take(&mut self.held)))
                    }
                }
            }
        }
    }

    /// Sends text held back while undecided, once it is known not to be a tool call.
    fn release_held(&mut self, emit: &mut Emit) {
        if !self.held.is_empty() && self.mode != GateMode::Pass {
            emit(GenerationEvent::Delta(std::mem::take(&mut self.held)));
        }
    }
}
