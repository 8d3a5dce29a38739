//! `dllm-bench`: see `dllm-bench --help`.

use std::io::Write as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    #[cfg(unix)]
    settle_thread_count();
    quiet_broken_pipe();
    match runner::cli::main() {
        Ok(code) => code,
        Err(err) => {
            // The exit status says it even where standard error is a closed pipe.
            let _ = writeln!(std::io::stderr(), "error: {}", runner::error_text(&err));
            ExitCode::from(runner::exit_code(&err) as u8)
        }
    }
}

/// Makes candle's CPU thread count a constant of the process.
///
/// candle's CPU matmul asks for its thread count at every call, and without `RAYON_NUM_THREADS` it works it out
/// each time, reading `/proc/cpuinfo` for the physical core count: a file read inside every matmul of every
/// timed forward (on a 2-core machine it made a tiny model's decode token 5x slower; on a many-core node the file
/// is larger still). Setting the variable is only sound while no other thread runs, and our code has no `unsafe`,
/// so the process replaces itself once, at its start, with `RAYON_NUM_THREADS` set to the count candle picks (the
/// same PID, arguments and environment otherwise). A valid value the user set is kept; if the replacement fails
/// the process goes on as before.
#[cfg(unix)]
fn settle_thread_count() {
    use std::os::unix::process::CommandExt;
    // candle reads the variable as a positive integer and ignores anything else.
    if std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| v.parse::<usize>().ok()).is_some_and(|n| n > 0) {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args = std::env::args_os();
    let Some(arg0) = args.next() else { return };
    // Only when this binary is the process image: under an explicit loader, an emulator or valgrind the image is
    // the other program, and executing it with our arguments would break the run (it then goes on as before).
    if std::path::Path::new(&arg0).file_name() != exe.file_name() {
        return;
    }
    let threads = candle_core::utils::get_num_threads();
    // `exec` returns only when it failed.
    let _failed =
        std::process::Command::new(&exe).arg0(arg0).args(args).env("RAYON_NUM_THREADS", threads.to_string()).exec();
}

/// Ends the process quietly when its standard output or error is a pipe whose reader has gone (`dllm-bench plan |
/// head`): Rust ignores SIGPIPE, so `println!` panics there with a backtrace hint and status 101. The commands
/// that print only what they computed stop there; `run` and `fetch`, which work on, lose their messages instead
/// (`say!`, `tell!`). The status is 141 (128 + SIGPIPE), what a shell reports for a program
/// the signal stopped. Any other failed write to standard output (`dllm-bench report x > /dev/full`) is an error
/// line and status 2, as other outputs that cannot be written are; every other panic keeps the default report.
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if (message.starts_with("failed printing to stdout") || message.starts_with("failed printing to stderr"))
            && message.contains("Broken pipe")
        {
            std::process::exit(141);
        }
        // Any other failed write to standard output (a full disk, a quota, an I/O error where it was redirected
        // to a file) is the output's fault, not the program's: said as an error (exit 2), not as a panic.
        if let Some(why) = message.strip_prefix("failed printing to stdout: ") {
            let _ = writeln!(
                std::io::stderr(),
                "error: cannot write to standard output: {why}; fix: free space where it goes (or send it \
                 elsewhere) and run the command again"
            );
            std::process::exit(2);
        }
        if message.starts_with("failed printing to stderr") {
            // Nowhere to say it; the exit status does.
            std::process::exit(2);
        }
        default(info)
    }));
}
