use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    cosmos_emulator::main(cosmos_emulator::Config::parse()).await
}
