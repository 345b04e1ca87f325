//! Fetch a page only if the notaries see the certificate this machine sees:
//! `cargo run --example fetch -- https://www.example.org/ [CONFIG_DIR]`
use std::{path::Path, sync::Arc};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let client = Arc::new(converge::Client::load(args.get(1).map(Path::new))?); // discovered when absent
    let agent = converge::http::agent_for(client, &args[0], None)?; // the notaries decide the handshake
    print!("{}", agent.get(&args[0]).call()?.into_string()?);
    Ok(())
}
