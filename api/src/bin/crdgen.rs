//! Writes the CRDs into a directory (`make manifests`), or prints them when none is given.
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args().nth(1);
    let crds = match kubesteer_api::crd::all() {
        Ok(crds) => crds,
        Err(e) => {
            eprintln!("crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (file, crd) in crds {
        let yaml = match kubesteer_api::crd::to_yaml(&crd) {
            Ok(y) => y,
            Err(e) => {
                eprintln!("crdgen: {file}: {e}");
                return ExitCode::FAILURE;
            }
        };
        match &dir {
            Some(d) => {
                let path = std::path::Path::new(d).join(&file);
                if let Err(e) = std::fs::write(&path, yaml) {
                    eprintln!("crdgen: writing {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            None => print!("---\n{yaml}"),
        }
    }
    ExitCode::SUCCESS
}
