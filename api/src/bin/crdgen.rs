//! Writes the CRDs into a directory (`make manifests`), or prints them when none is given;
//! `--scaler-v1beta1` prints the Scaler CRD serving both versions.
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args().nth(1);
    // The Scaler CRD with v1beta1 beside v1alpha1, for trying it out before it is the default.
    if dir.as_deref() == Some("--scaler-v1beta1") {
        let yaml = kubesteer_api::convert::scaler_crd(None)
            .map_err(|e| e.to_string())
            .and_then(|crd| kubesteer_api::crd::to_yaml(&crd).map_err(|e| e.to_string()));
        return match yaml {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("crdgen: scalers.kubesteer.io: {e}");
                ExitCode::FAILURE
            }
        };
    }
    for (file, crd) in kubesteer_api::crd::all() {
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
