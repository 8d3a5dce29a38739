//! Entry point: mounts the app (wasm); natively there is nothing to run.

#[cfg(target_arch = "wasm32")]
fn main() {
    explorer::app::mount();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("the explorer is a browser app: build it with `trunk build` in explorer/ (see explorer/README.md)");
    std::process::exit(2);
}
