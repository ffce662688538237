//! `warden ask "…"`: one question to the chat model, answer streamed to the terminal.

use std::io::Write;
use std::process::ExitCode;

use crate::config::{ModelFlags, Needs};
use crate::engine::{ChatMessage, ChatRequest, GenerationEvent, Role, SamplingParams};

#[derive(Debug, clap::Args)]
pub struct AskArgs {
    /// The question.
    question: String,
    /// A system prompt.
    #[arg(long)]
    system: Option<String>,
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// 0 is greedy (deterministic).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    models: ModelFlags,
}

pub fn run(args: AskArgs) -> anyhow::Result<ExitCode> {
    if args.question.trim().is_empty() {
        anyhow::bail!("the question is empty");
    }
    if !(0.0..=2.0).contains(&args.temperature) {
        anyhow::bail!("--temperature must be between 0 and 2");
    }
    let engine = super::load_engine(&args.models, Needs::Chat)?;
    let Some(model) = engine.chat_model(None) else {
        anyhow::bail!("no chat model loaded")
    };
    let mut messages = Vec::new();
    if let Some(system) = args.system {
        messages.push(ChatMessage::new(Role::System, system));
    }
    messages.push(ChatMessage::new(Role::User, args.question));
    let sampling = SamplingParams {
        temperature: args.temperature,
        seed: args.seed,
        ..SamplingParams::default()
    };
    let request = ChatRequest {
        messages,
        sampling,
        max_tokens: Some(args.max_tokens),
        ..ChatRequest::default()
    };
    let mut stream = model.submit(request)?;
    let mut stdout = std::io::stdout().lock();
    while let Some(event) = stream.next_blocking() {
        match event? {
            GenerationEvent::Delta(text) => {
                stdout.write_all(text.as_bytes())?;
                stdout.flush()?;
            }
            GenerationEvent::Done(summary) => {
                writeln!(stdout)?;
                tracing::debug!(?summary, "done");
                break;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
