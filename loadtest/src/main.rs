use clap::Parser;

fn main() -> std::process::ExitCode {
    loadtest::cli::main(loadtest::cli::Cli::parse())
}
