//! `warden bench upstream --upstream URL --upstream-model NAME --json`: what the upstream
//! path costs. The same streamed chat request goes straight to the upstream engine and
//! through a Warden started for the run with `--chat-upstream URL`, alternating, and the
//! report gives each side's time to first token and decode rate and the difference: the
//! overhead of Warden's queue, dispatcher, stream relay and HTTP layer.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::bench_serve::{prepare_accounts, BenchServer};

/// The request both sides answer.
const PROMPT: &str = "List ten checks an on-call engineer makes when a Linux host's disk is \
                      full, one line each, with the command for each.";

#[derive(Debug, clap::Args)]
pub struct UpstreamBenchArgs {
    /// The upstream's OpenAI-compatible base URL, ending in /v1.
    #[arg(long)]
    upstream: String,
    /// The model's name on the upstream.
    #[arg(long)]
    upstream_model: String,
    /// File holding the upstream's API key (else WARDEN_UPSTREAM_API_KEY is passed on).
    #[arg(long)]
    upstream_api_key_file: Option<PathBuf>,
    /// Requests per side, alternating.
    #[arg(long, default_value_t = 8)]
    requests: usize,
    /// Tokens per answer (temperature 0, so both sides generate the same text).
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Models folder for the Warden side (its embedding model).
    #[arg(long, env = "WARDEN_MODELS", default_value = "models")]
    models: PathBuf,
    /// Print JSON (the only output format).
    #[arg(long)]
    json: bool,
}

/// One streamed answer as the client saw it.
struct Streamed {
    ttft: Duration,
    /// Tokens after the first, per second of streaming after the first.
    decode_tokens_per_s: Option<f64>,
    completion_tokens: u64,
}

pub fn run(args: UpstreamBenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.requests > 0, "--requests must be at least 1");
    let base = crate::upstream::config::check_url(&args.upstream).map_err(anyhow::Error::msg)?;
    let key = crate::config::upstream_api_key(args.upstream_api_key_file.as_deref())?;
    let key = key.as_ref().map(crate::upstream::ApiKey::expose);
    let data = tempfile::tempdir().context("cannot create a temporary data folder")?;
    let tokens = prepare_accounts(data.path(), 1)?;
    let mut flags: Vec<std::ffi::OsString> = vec![
        "--chat-upstream".into(),
        base.clone().into(),
        "--chat-upstream-model".into(),
        args.upstream_model.clone().into(),
        "--models".into(),
        args.models.clone().into(),
        "--sample-kb".into(),
        data.path().join("no-sample").into(),
    ];
    if let Some(path) = &args.upstream_api_key_file {
        flags.extend(["--upstream-api-key-file".into(), path.clone().into()]);
    }
    let mut server = BenchServer::launch(data.path(), &flags, "warn")?;
    let warden_url = server.url("/v1/chat/completions");
    let direct_url = format!("{base}/chat/completions");
    let measured = (|| -> anyhow::Result<(Vec<Streamed>, Vec<Streamed>)> {
        // One warm-up each: the upstream's prompt cache and Warden's connection pool.
        stream(&direct_url, key, &args)?;
        stream(
            &warden_url,
            Some(tokens[0].trim_start_matches("Bearer ")),
            &args,
        )?;
        let (mut direct, mut through) = (Vec::new(), Vec::new());
        for _ in 0..args.requests {
            direct.push(stream(&direct_url, key, &args)?);
            through.push(stream(
                &warden_url,
                Some(tokens[0].trim_start_matches("Bearer ")),
                &args,
            )?);
        }
        Ok((direct, through))
    })();
    server.stop();
    let (direct, through) = measured?;
    anyhow::ensure!(
        direct
            .iter()
            .chain(&through)
            .all(|s| s.completion_tokens > 1),
        "an answer had fewer than two tokens: nothing to measure"
    );
    let direct = summary(&direct);
    let through = summary(&through);
    let ttft_delta = through["ttft_ms_p50"].as_f64().unwrap_or(f64::NAN)
        - direct["ttft_ms_p50"].as_f64().unwrap_or(f64::NAN);
    let rate_ratio = through["decode_tokens_per_s_mean"]
        .as_f64()
        .unwrap_or(f64::NAN)
        / direct["decode_tokens_per_s_mean"]
            .as_f64()
            .unwrap_or(f64::NAN);
    println!(
        "{}",
        json!({
            "bench": "upstream",
            "upstream_model": args.upstream_model,
            "requests_per_side": args.requests,
            "max_tokens": args.max_tokens,
            "direct": direct,
            "through_warden": through,
            "ttft_ms_p50_overhead": ttft_delta,
            "decode_rate_overhead_pct": (1.0 - rate_ratio) * 100.0,
        })
    );
    Ok(ExitCode::SUCCESS)
}

fn summary(samples: &[Streamed]) -> Value {
    let mut ttfts: Vec<f64> = samples
        .iter()
        .map(|s| s.ttft.as_secs_f64() * 1000.0)
        .collect();
    ttfts.sort_by(f64::total_cmp);
    let rates: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.decode_tokens_per_s)
        .collect();
    json!({
        "ttft_ms_p50": ttfts[ttfts.len() / 2],
        "ttft_ms_max": ttfts[ttfts.len() - 1],
        "decode_tokens_per_s_mean": rates.iter().sum::<f64>() / rates.len().max(1) as f64,
        "completion_tokens_mean": samples.iter().map(|s| s.completion_tokens).sum::<u64>() as f64
            / samples.len() as f64,
    })
}

/// One streamed request; times the first and last content pieces.
fn stream(url: &str, key: Option<&str>, args: &UpstreamBenchArgs) -> anyhow::Result<Streamed> {
    let mut request = ureq::post(url).timeout(Duration::from_secs(600));
    if let Some(key) = key {
        request = request.set("Authorization", &format!("Bearer {key}"));
    }
    let sent = Instant::now();
    let response = request
        .send_json(json!({
            "model": args.upstream_model,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": args.max_tokens, "temperature": 0, "stream": true,
            "stream_options": {"include_usage": true},
        }))
        .with_context(|| format!("POST {url}"))?;
    let (mut first, mut last, mut pieces, mut usage) = (None, sent, 0_u64, None);
    for line in BufReader::new(response.into_reader()).lines() {
        let line = line?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data.trim() == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(data).context("a chunk is not JSON")?;
        anyhow::ensure!(chunk.get("error").is_none(), "the stream failed: {chunk}");
        if chunk["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
        {
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
            pieces += 1;
        }
        if let Some(tokens) = chunk["usage"]["completion_tokens"].as_u64() {
            usage = Some(tokens);
        }
    }
    let first = first.context("the answer had no text")?;
    let completion_tokens = usage.unwrap_or(pieces);
    let streaming = (last - first).as_secs_f64();
    Ok(Streamed {
        ttft: first - sent,
        decode_tokens_per_s: (streaming > 0.0 && completion_tokens > 1)
            .then(|| (completion_tokens - 1) as f64 / streaming),
        completion_tokens,
    })
}
