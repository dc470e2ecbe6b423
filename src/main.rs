//! The `imagemap` command (and the `kubectl imagemap` plugin): parses the command line and
//! runs the subcommand the library holds.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use imagemap::cli::{Cli, Command, crds, explain, resolve, run, status};

/// mimalloc rather than the C library's allocator: the operator's memory follows its caches
/// (freed list pages and replaced objects go back to the system instead of staying with a
/// thread's arena), and the statically linked binary of the container image gets the same
/// allocator, and speed, as the build the benchmark measures.
///
/// Built without transparent huge pages (`no_thp`): mimalloc asks for them on its arenas, and
/// where the kernel grants them on request (`madvise`, the common setting) every page the
/// operator touched counted as 2 MiB — at 3,000 VMs 60 of the 101 MiB resident were such
/// pages, against 20 MiB of live heap.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's index of its option `purge_delay` (`mi_option_e` in mimalloc.h, v3; the Rust
/// bindings predate it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Memory freed goes back to the system at once. mimalloc delays that by a second and carries
/// it out on a later allocation, so the pages of a list or a fan-out stayed resident for as
/// long as the operator then sat quiet (16 MiB of 65 at 3,000 VMs).
#[allow(unsafe_code)]
fn return_freed_memory_at_once() {
    // SAFETY: sets an integer option, which mimalloc reads at each purge; any value is valid
    // and the call is allowed at any time from any thread.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}

fn main() -> ExitCode {
    return_freed_memory_at_once();
    let cli = parse();
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    let code = match cli.command {
        Command::Resolve(args) => resolve::run(&args, &mut stdout.lock(), &mut stderr.lock()),
        Command::Crds(args) => crds::run(&args, &mut stdout.lock(), &mut stderr.lock()),
        Command::Status(args) => status::run(&args, &mut stdout.lock(), &mut stderr.lock()),
        Command::Explain(args) => explain::run(&args, &mut stdout.lock(), &mut stderr.lock()),
        // Not locked here: the operator's log writers take stderr's lock line by line.
        Command::Run(args) => {
            run::init_logging(args.log_format);
            let result = tokio::runtime::Runtime::new()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(run::run(&args)));
            match result {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    1
                }
            }
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// The command line; installed as `kubectl-imagemap` (krew's convention), the binary is a
/// kubectl plugin, and its help and errors name it `kubectl imagemap`.
fn parse() -> Cli {
    let mut command = Cli::command();
    let invoked = std::env::args_os().next().map(std::path::PathBuf::from);
    if invoked
        .as_deref()
        .and_then(std::path::Path::file_name)
        .is_some_and(|name| name == "kubectl-imagemap")
    {
        command = command.bin_name("kubectl imagemap");
    }
    Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
}
