//! Generation for one chat model: prompt rendering and tokenization, prompt-prefix KV
//! reuse per sequence slot, chunked prefill, constrained sampling, stop conditions,
//! streaming deltas. A request is a `Sequence` advanced by `step`, and a step runs every
//! active sequence through the model together (continuous batching): one token of each
//! decoding sequence and the next part of each prompt being prefilled, so a joining
//! request neither waits for the others to finish nor stalls their decoding. Runs on the
//! model's worker thread only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::chat_template::{ChatTemplate, PromptPiece};
use super::constrained::{Constraint, ConstraintFactory, OutputLimits, OutputShape};
use super::error::{EngineError, Result};
use super::models::CausalLm;
use super::quant::pool;
use super::sampling::Sampler;
use super::text_stream::{Pushed, TextStream};
use super::tokenizer::TextTokenizer;
use super::types::{ChatRequest, FinishReason, GenerationEvent, GenerationSummary, ToolChoice};

/// Prompt tokens one model pass runs, over all the prompts being prefilled: bounds the
/// size of the attention score matrix for long prompts and how long the decoding
/// sequences sharing the pass wait for their next token.
const PREFILL_CHUNK: usize = 512;

/// Prompt tokens another prompt must be about to compute for this one to wait a pass and
/// copy them instead of computing them too.
const SHARED_PREFIX_MIN: usize = 32;

/// Tokens the grammar may force in a row before the next pass runs them (bounds one
/// sequence's part of a pass, and the grammar work between passes).
const FORCED_RUN_MAX: usize = 32;

/// A loaded chat model with everything needed to serve requests.
pub struct ChatRuntime {
    model: Box<dyn CausalLm>,
    tokenizer: Arc<TextTokenizer>,
    template: ChatTemplate,
    constraints: ConstraintFactory,
    /// Per sequence slot: the tokens whose keys and values are in its cache, in order.
    cached: Vec<Vec<u32>>,
    /// Slots a running sequence holds.
    busy: Vec<bool>,
}

/// Where generated events go; `false` means the receiver is gone.
pub type Emit<'a> = dyn FnMut(GenerationEvent) -> bool + 'a;

/// One request being generated: everything its steps need between model calls.
pub struct Sequence {
    slot: usize,
    shape: OutputShape,
    constraint: Option<Constraint>,
    sampler: Sampler,
    stream: TextStream,
    generated: Vec<u32>,
    deltas: DeltaGate,
    finish: FinishReason,
    stop: Vec<String>,
    ignore_eos: bool,
    max_new: usize,
    prompt: Vec<u32>,
    /// True until every prompt token is in the slot's cache.
    prefilling: bool,
    reused: usize,
    started: Instant,
    prefill_ms: f64,
    decode_started: Instant,
    /// The tokens the next pass runs (generated, not yet in the cache): the sampled one
    /// and any the grammar forced after it. Empty once finished.
    next: Vec<u32>,
    /// What ended the sequence early, if anything went wrong with it alone.
    failed: Option<EngineError>,
}

impl Sequence {
    /// True once the sequence needs no more model steps.
    pub fn finished(&self) -> bool {
        self.next.is_empty() && !self.prefilling
    }
}

/// What was done to a part's logits before sampling.
enum Mask {
    /// None: the sequence is free text, or does not sample after this pass.
    Free,
    Applied,
    Failed(EngineError),
}

/// The tokens the grammar forces after one sequence's new token (`fast_forward`), each
/// with whether it completes the grammar.
struct Chain {
    /// Its place in the step's batch.
    index: usize,
    /// How many it may take.
    room: usize,
    forced: Result<Vec<(u32, bool)>>,
}

/// One sequence's part of a model pass.
struct PlannedPart {
    /// Its place in the step's batch.
    index: usize,
    slot: usize,
    tokens: Vec<u32>,
}

impl ChatRuntime {
    pub fn new(
        model: Box<dyn CausalLm>,
        tokenizer: Arc<TextTokenizer>,
        template: ChatTemplate,
        limits: OutputLimits,
    ) -> Result<Self> {
        let constraints = ConstraintFactory::new(tokenizer.clone(), limits)?;
        let slots = model.slots();
        Ok(Self {
            model,
            tokenizer,
            template,
            constraints,
            cached: vec![Vec::new(); slots],
            busy: vec![false; slots],
        })
    }

    /// Asks the model for `slots` sequence caches; returns how many it holds (1 for models
    /// that decode one sequence at a time).
    pub fn set_slots(&mut self, slots: usize) -> usize {
        let held = self.model.set_slots(slots.max(1));
        self.cached.resize_with(held, Vec::new);
        self.busy.resize(held, false);
        held
    }

    pub fn context_length(&self) -> usize {
        self.model.context_length()
    }

    /// True when a new sequence can start now.
    pub fn has_free_slot(&self) -> bool {
        self.busy.iter().any(|b| !b)
    }

    /// Forgets every cached prompt (after a failure the caches may be inconsistent) and
    /// frees every slot.
    pub fn reset(&mut self) {
        for slot in 0..self.cached.len() {
            self.cached[slot].clear();
            self.model.truncate_slot(slot, 0);
            self.busy[slot] = false;
        }
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

    /// Starts a request in a free slot: takes the longest cached prefix of its prompt (its
    /// slot's own, or a copy of another slot's) and leaves the rest to `step`, which
    /// prefills it alongside the other sequences' decoding.
    pub fn start(&mut self, request: &ChatRequest) -> Result<Sequence> {
        let shape = OutputShape::for_request(request)?;
        let constraint = self.constraints.constraint(&shape)?;
        let prompt = self.prompt_tokens(request)?;
        let context = self.model.context_length();
        if prompt.len() >= context {
            return Err(EngineError::ContextOverflow {
                prompt: prompt.len(),
                context,
            });
        }
        if prompt.is_empty() {
            return Err(EngineError::Inference("the prompt has no tokens".into()));
        }
        let slot = self
            .best_slot(&prompt)
            .ok_or_else(|| EngineError::Inference("no free sequence slot".into()))?;
        let max_new = request
            .max_tokens
            .unwrap_or(usize::MAX)
            .min(context - prompt.len());
        let started = Instant::now();
        // At least one token must run to produce logits.
        let mut reused = common_prefix(&self.cached[slot], &prompt).min(prompt.len() - 1);
        if !self.model.truncate_slot(slot, reused) {
            self.model.truncate_slot(slot, 0);
            reused = 0;
        }
        self.cached[slot].truncate(reused);
        self.busy[slot] = true;
        let mut sequence = Sequence {
            slot,
            deltas: DeltaGate::new(&shape),
            shape,
            constraint,
            sampler: Sampler::new(request.sampling.clone()),
            stream: TextStream::default(),
            generated: Vec::new(),
            finish: FinishReason::Length,
            stop: request.stop.clone(),
            ignore_eos: request.ignore_eos,
            max_new,
            prompt,
            prefilling: true,
            reused,
            started,
            prefill_ms: 0.0,
            decode_started: started,
            next: Vec::new(),
            failed: None,
        };
        self.adopt_prefix(&mut sequence);
        Ok(sequence)
    }

    /// Runs one model pass over every unfinished sequence: the next token of each decoding
    /// one, and the next part of each prompt still prefilling (up to `PREFILL_CHUNK` prompt
    /// tokens in all, oldest requests first); then samples the token after each decoded
    /// token and after each completed prompt. A failure fails the whole step (the caches
    /// are reset).
    pub fn step(&mut self, batch: &mut [(&mut Sequence, &mut Emit, &AtomicBool)]) -> Result<()> {
        for (sequence, _, cancel) in batch.iter_mut() {
            if sequence.prefilling && cancel.load(Ordering::Relaxed) {
                // Nothing to generate from: `finish` reports it.
                sequence.prefilling = false;
                sequence.failed = Some(EngineError::Inference("cancelled during prefill".into()));
            }
            if sequence.prefilling {
                self.adopt_prefix(sequence);
            }
        }
        let plan = self.plan(batch);
        if plan.is_empty() {
            return Ok(());
        }
        let steps: Vec<(usize, &[u32], usize)> = plan
            .iter()
            .map(|part| (part.slot, &part.tokens[..], self.cached[part.slot].len()))
            .collect();
        let began = Instant::now();
        let mut logits = match self.model.forward_batch(&steps) {
            Ok(logits) if logits.len() == steps.len() => logits,
            Ok(_) => {
                self.reset();
                return Err(EngineError::Inference(
                    "the model returned too few logits".into(),
                ));
            }
            Err(err) => {
                self.reset();
                return Err(err.into());
            }
        };
        let forward_ms = began.elapsed().as_secs_f64() * 1e3;
        let (parts, rows) = (
            plan.len(),
            plan.iter().map(|p| p.tokens.len()).sum::<usize>(),
        );
        let mut masks = self.mask_side_by_side(&plan, batch, &mut logits)?;
        for ((part, step_logits), mask) in plan.into_iter().zip(logits).zip(masks.drain(..)) {
            let (sequence, emit, cancel) = &mut batch[part.index];
            let samples = self.samples_after(sequence, &part);
            self.cached[sequence.slot].extend_from_slice(&part.tokens);
            if sequence.prefilling {
                if !samples {
                    continue;
                }
                sequence.prefilling = false;
                sequence.prefill_ms = sequence.started.elapsed().as_secs_f64() * 1e3;
                sequence.decode_started = Instant::now();
                if sequence.max_new == 0 {
                    continue;
                }
            }
            let taken = match mask {
                Mask::Failed(err) if !cancel.load(Ordering::Relaxed) => Err(err),
                _ => self.take(sequence, step_logits, cancel, *emit),
            };
            if let Err(err) = taken {
                // This sequence's failure alone: `finish` reports it.
                sequence.next.clear();
                sequence.failed = Some(err);
            }
        }
        self.fast_forward(batch)?;
        tracing::trace!(
            parts,
            rows,
            forward_ms,
            sample_ms = began.elapsed().as_secs_f64() * 1e3 - forward_ms,
            "model pass"
        );
        Ok(())
    }

    /// What the next pass runs for each sequence of `batch`. A prompt waits a pass when
    /// one planned before it is about to compute a longer shared prefix (a common system
    /// prompt): the next pass copies those keys and values instead of computing them again.
    fn plan(&self, batch: &[(&mut Sequence, &mut Emit, &AtomicBool)]) -> Vec<PlannedPart> {
        let mut plan = Vec::new();
        let mut budget = PREFILL_CHUNK;
        let mut prefills: Vec<&[u32]> = Vec::new();
        for (index, (sequence, _, _)) in batch.iter().enumerate() {
            let slot = sequence.slot;
            if !sequence.next.is_empty() {
                plan.push(PlannedPart {
                    index,
                    slot,
                    tokens: sequence.next.clone(),
                });
                continue;
            }
            if !sequence.prefilling || budget == 0 {
                continue;
            }
            let prompt = &sequence.prompt;
            let done = self.cached[slot].len();
            let worth_waiting = prefills.iter().any(|planned| {
                common_prefix(planned, prompt).min(prompt.len() - 1) >= done + SHARED_PREFIX_MIN
            });
            if worth_waiting {
                continue;
            }
            let end = (done + budget).min(prompt.len());
            budget -= end - done;
            prefills.push(&prompt[..end]);
            plan.push(PlannedPart {
                index,
                slot,
                tokens: prompt[done..end].to_vec(),
            });
        }
        plan
    }

    /// Ends a sequence: frees its slot, sends held text, parses tool calls.
    pub fn finish(&mut self, mut s: Sequence, emit: &mut Emit) -> Result<GenerationSummary> {
        if let Some(busy) = self.busy.get_mut(s.slot) {
            *busy = false;
        }
        if let Some(err) = s.failed.take() {
            return Err(err);
        }
        let tail = s.stream.finish();
        s.deltas.send(tail, emit);
        // A cut-off output (length, cancel) keeps its complete calls; one without any is
        // sent as text.
        let mut finish = s.finish;
        let tool_calls = match s.shape.parse_tool_calls(s.stream.text()) {
            Ok(calls) => calls,
            Err(err) if finish == FinishReason::Stop => return Err(err),
            Err(_) => s.shape.complete_tool_calls(s.stream.text()),
        };
        if !tool_calls.is_empty() {
            finish = FinishReason::ToolCalls;
        } else {
            s.deltas.release_held(emit);
        }
        Ok(GenerationSummary {
            prompt_tokens: s.prompt.len(),
            cached_prompt_tokens: s.reused,
            completion_tokens: s.generated.len(),
            finish_reason: finish,
            tool_calls,
            prefill_ms: s.prefill_ms,
            decode_ms: s.decode_started.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// True when `s` samples a token after its `part` of a pass runs: it is decoding, or the
    /// part completes its prompt (before the part joins the slot's cache).
    fn samples_after(&self, s: &Sequence, part: &PlannedPart) -> bool {
        !s.prefilling || self.cached[part.slot].len() + part.tokens.len() >= s.prompt.len()
    }

    /// Applies the token masks of the constrained sequences that sample after this pass
    /// (`plan[i]`'s to `logits[i]`), side by side. Returns what happened to each part's
    /// logits.
    fn mask_side_by_side(
        &self,
        plan: &[PlannedPart],
        batch: &mut [(&mut Sequence, &mut Emit, &AtomicBool)],
        logits: &mut [Vec<f32>],
    ) -> Result<Vec<Mask>> {
        let mut masks: Vec<Mask> = plan.iter().map(|_| Mask::Free).collect();
        let samples: Vec<bool> = plan
            .iter()
            .map(|part| {
                self.samples_after(&batch[part.index].0, part) && batch[part.index].0.max_new > 0
            })
            .collect();
        for (s, _, _) in batch.iter_mut() {
            let left = s.max_new.saturating_sub(s.generated.len());
            if let Some(constraint) = s.constraint.as_mut() {
                constraint.set_budget(left, s.max_new);
            }
        }
        let mut constraints: Vec<Option<&mut Constraint>> = batch
            .iter_mut()
            .map(|(s, _, _)| s.constraint.as_mut())
            .collect();
        let mut work = Vec::new();
        let parts = plan
            .iter()
            .zip(samples)
            .zip(logits.iter_mut())
            .zip(&mut masks);
        for (((part, samples), part_logits), mask) in parts {
            if let (true, Some(constraint)) = (samples, constraints[part.index].take()) {
                work.push((constraint, part_logits, mask));
            }
        }
        self.side_by_side(&mut work, |(constraint, logits, mask)| {
            **mask = match constraint.mask(logits) {
                Ok(()) => Mask::Applied,
                Err(err) => Mask::Failed(err),
            };
        })?;
        drop(work);
        Ok(masks)
    }

    /// Runs `run` on every item, side by side on the model's threads where it has several:
    /// each item is one sequence's grammar state, so they need no order, and with many
    /// sequences the grammar is a real part of a decode step.
    fn side_by_side<T: Send>(&self, items: &mut [T], run: impl Fn(&mut T) + Sync) -> Result<()> {
        let Some(pool) = self
            .model
            .pool()
            .filter(|p| p.threads() > 1 && items.len() > 1)
        else {
            items.iter_mut().for_each(run);
            return Ok(());
        };
        let units = items.len();
        let shared = pool::SharedRows::new(items);
        let job = |mine: std::ops::Range<usize>| {
            for i in mine {
                // SAFETY: each unit is one item, and each item one chunk's alone.
                run(unsafe { &mut shared.slice(i, 1)[0] });
            }
        };
        pool.run_units(units, 1, &job)
            .map_err(|_| EngineError::Inference("a grammar thread failed".into()))
    }

    /// Samples the token after `logits` (masked already if the sequence is constrained)
    /// and decides whether the sequence goes on.
    fn take(
        &mut self,
        s: &mut Sequence,
        mut logits: Vec<f32>,
        cancel: &AtomicBool,
        emit: &mut Emit,
    ) -> Result<()> {
        s.next.clear();
        if cancel.load(Ordering::Relaxed) {
            s.finish = FinishReason::Cancelled;
            return Ok(());
        }
        let Some(token) = s.sampler.sample(&mut logits, &s.generated) else {
            return Err(EngineError::Inference("no token can be sampled".into()));
        };
        let grammar_done = advance(s.constraint.as_mut(), token)?;
        self.accept(s, token, grammar_done, emit);
        Ok(())
    }

    /// Takes `token` (sampled, or forced by the grammar, which is already past it) into
    /// `s`'s output and decides whether the sequence goes on: if so the token joins the
    /// ones the next pass runs, if not none run. Returns whether it goes on.
    fn accept(&self, s: &mut Sequence, token: u32, grammar_done: bool, emit: &mut Emit) -> bool {
        if self.tokenizer.is_eos(token) && !s.ignore_eos {
            s.finish = FinishReason::Stop;
            s.next.clear();
            return false;
        }
        s.generated.push(token);
        let bytes = if self.tokenizer.is_special(token) {
            &[][..]
        } else {
            self.tokenizer.token_bytes(token)
        };
        let stopped = match s.stream.push(bytes, &s.stop) {
            Pushed::Text(text) => !s.deltas.send(text, emit),
            Pushed::Stopped(text) => {
                s.deltas.send(text, emit);
                s.finish = FinishReason::Stop;
                true
            }
        };
        let repeated_call =
            bytes.contains(&b'>') && s.shape.ends_with_repeated_call(s.stream.text());
        if grammar_done || repeated_call {
            s.finish = FinishReason::Stop;
        }
        let goes_on = !(stopped || grammar_done || repeated_call) && s.generated.len() < s.max_new;
        if goes_on {
            s.next.push(token);
        } else {
            s.next.clear();
        }
        goes_on
    }

    /// Runs ahead of the model where the grammar leaves no choice: after each constrained
    /// sequence's new token, the tokens the grammar forces next (the only ones sampling
    /// could pick) are taken at once, so the next pass runs them together as one part,
    /// the way it runs a prompt, and computes logits only after the last. Structured
    /// output is full of them (keys, punctuation, a tool's name once its first letters
    /// fix it), so this saves a pass each where one sequence decodes alone and the
    /// vocabulary projection of each in a batch; the text is the same as sampling them.
    /// The grammar work runs side by side, as the masks do.
    fn fast_forward(&self, batch: &mut [(&mut Sequence, &mut Emit, &AtomicBool)]) -> Result<()> {
        let mut work: Vec<(&mut Constraint, Chain)> = Vec::new();
        for (index, (s, _, _)) in batch.iter_mut().enumerate() {
            let room = s
                .max_new
                .saturating_sub(s.generated.len())
                .min(FORCED_RUN_MAX);
            if s.next.is_empty() || room == 0 {
                continue;
            }
            if let Some(constraint) = s.constraint.as_mut() {
                constraint.set_budget(s.max_new.saturating_sub(s.generated.len()), s.max_new);
                let chain = Chain {
                    index,
                    room,
                    forced: Ok(Vec::new()),
                };
                work.push((constraint, chain));
            }
        }
        let tokenizer = &*self.tokenizer;
        self.side_by_side(&mut work, |(constraint, chain)| {
            chain.forced = forced_run(constraint, chain.room, tokenizer);
        })?;
        let chains: Vec<Chain> = work.into_iter().map(|(_, chain)| chain).collect();
        for chain in chains {
            let (s, emit, _) = &mut batch[chain.index];
            match chain.forced {
                Ok(forced) => {
                    for (token, done) in forced {
                        if !self.accept(s, token, done, *emit) {
                            break;
                        }
                    }
                }
                Err(err) => {
                    // This sequence's failure alone: `finish` reports it.
                    s.next.clear();
                    s.failed = Some(err);
                }
            }
        }
        Ok(())
    }

    /// The free slot whose cache shares the longest prefix with `prompt`.
    fn best_slot(&self, prompt: &[u32]) -> Option<usize> {
        (0..self.cached.len())
            .filter(|&slot| !self.busy[slot])
            .max_by_key(|&slot| common_prefix(&self.cached[slot], prompt))
    }

    /// Takes another slot's cached keys and values (shared pages, or a copy, as the model
    /// holds them) for a longer part of `s`'s prompt than its own slot holds (same bits as
    /// computing them).
    fn adopt_prefix(&mut self, s: &mut Sequence) {
        let slot = s.slot;
        let done = self.cached[slot].len();
        let donor = (0..self.cached.len())
            .filter(|&other| other != slot)
            .map(|other| (other, common_prefix(&self.cached[other], &s.prompt)))
            .max_by_key(|&(_, shared)| shared);
        if let Some((other, shared)) = donor {
            let shared = shared.min(s.prompt.len() - 1);
            if shared > done && self.model.copy_prefix(other, slot, shared) {
                self.cached[slot].clear();
                self.cached[slot].extend_from_slice(&s.prompt[..shared]);
                s.reused += shared - done;
            }
        }
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The tokens the grammar forces from its state, at most `room`, each with whether it
/// completes the grammar; the constraint ends past them.
fn forced_run(
    constraint: &mut Constraint,
    room: usize,
    tokenizer: &TextTokenizer,
) -> Result<Vec<(u32, bool)>> {
    let mut forced = Vec::new();
    while forced.len() < room {
        let Some(token) = constraint.forced()? else {
            break;
        };
        let done = advance(Some(&mut *constraint), token)?;
        forced.push((token, done));
        if done || tokenizer.is_eos(token) {
            break;
        }
    }
    Ok(forced)
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

#[cfg(test)]
mod tests;
