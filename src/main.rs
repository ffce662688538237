//! Entry point: parse the command line, run it, turn errors into a message and exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    match warden::cli::run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
