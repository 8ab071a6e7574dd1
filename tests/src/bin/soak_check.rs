//! Checks a soak's history again (`cargo run -p kubesteer-tests --bin soak-check -- FILE
//! [--grace SECONDS]`): prints each broken promise with its history lines, and exits 1 when
//! there is one. The soak (`make soak`) runs the same check at its end.
use std::process::ExitCode;

use kubesteer_tests::soak::{check, parse, Rules, GRACE_SECONDS};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (file, grace) = match args.as_slice() {
        [file] => (file, GRACE_SECONDS),
        [file, flag, grace] if flag == "--grace" => match grace.parse() {
            Ok(g) => (file, g),
            Err(e) => {
                eprintln!("soak-check: --grace {grace}: {e}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: soak-check HISTORY.jsonl [--grace SECONDS]");
            return ExitCode::from(2);
        }
    };
    let events = match std::fs::read_to_string(file)
        .map_err(|e| format!("{file}: {e}"))
        .and_then(|text| parse(&text))
    {
        Ok(events) => events,
        Err(e) => {
            eprintln!("soak-check: {e}");
            return ExitCode::from(2);
        }
    };
    let violations = check(&events, Rules { grace });
    for v in &violations {
        println!("{v}");
    }
    println!(
        "{} events, {} violations (grace {grace} s)",
        events.len(),
        violations.len()
    );
    if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
