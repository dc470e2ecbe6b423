use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use imagemap::cli::{Cli, Command, resolve};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Resolve(args) => resolve::run(
            &args,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        ),
        Command::Run(args) => {
            imagemap::cli::run::init_logging(args.log_format);
            let runtime = tokio::runtime::Runtime::new();
            match runtime
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(imagemap::cli::run::run(&args)))
            {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    1
                }
            }
        }
        Command::Crds => match imagemap::crds::all_yaml() {
            Ok(yaml) => match std::io::stdout().lock().write_all(yaml.as_bytes()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("error: writing output: {e}");
                    1
                }
            },
            Err(e) => {
                eprintln!("error: rendering CRDs: {e}");
                1
            }
        },
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
