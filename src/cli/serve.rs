//! `warden serve`: loads the models, binds the address, serves HTTP until Ctrl-C/SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use super::DataFlags;
use crate::config::{ModelFlags, ServeConfig};
use crate::engine::Engine;
use crate::http::{self, AppState};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Binds loopback by default; choose 0.0.0.0 deliberately.
    #[arg(long, env = "WARDEN_ADDR", default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    #[command(flatten)]
    data: DataFlags,
    #[command(flatten)]
    models: ModelFlags,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = ServeConfig::new(args.addr, args.data.data, &args.models)?;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data folder {}", config.data_dir.display()))?;
    let engine = Engine::load(&config.engine);
    for model in engine.models() {
        tracing::info!(model = %model.id, kind = ?model.kind, arch = %model.architecture, "model loaded");
    }
    for failure in engine.failures() {
        tracing::error!(model = %failure.id, path = %failure.path, "model unavailable: {}", failure.error);
    }
    let state = AppState {
        engine: Arc::new(engine),
        limits: config.http,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .with_context(|| format!("cannot listen on {}", config.addr))?;
        let local = listener
            .local_addr()
            .context("cannot read the bound address")?;
        println!("Warden listening on http://{local}");
        http::serve(listener, state, shutdown_signal())
            .await
            .context("HTTP server failed")
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutting down");
}
