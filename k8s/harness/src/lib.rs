//! `k8s-harness`: dronelab's Kubernetes manifests, proved where no cluster can run.
//!
//! - [`render`]: `kubectl kustomize` an overlay and read the objects;
//! - [`contract`]: check a render against the binaries it runs (environment, ports,
//!   probes, Services, labels, security, the stage knobs);
//! - [`workload`]: Deployments and StatefulSets as pod templates run `replicas` times,
//!   with each container's environment resolved as the kubelet does;
//! - [`image`]: the project's image built where no base image can be pulled;
//! - [`podman`]: run a render's workloads as containers on a podman network, one
//!   container per replica under its Service's name, with the probes as gates — and
//!   re-apply another overlay the way a rollout would;
//! - [`proof`]: the whole proof that the manifests run (the image, the local overlays
//!   as containers, the quick tuning run against them, the verdicts).

pub mod contract;
pub mod image;
pub mod podman;
pub mod proof;
pub mod render;
pub mod workload;

use std::path::{Path, PathBuf};

/// The load generators' Job, as YAML with a header saying where it comes from.
pub fn loadgen_yaml() -> Result<String, String> {
    let job = k8s_manifests::LoadgenJob::default().job();
    let yaml = serde_saphyr::to_string(&job).map_err(|e| e.to_string())?;
    Ok(format!(
        "# The distributed load generator: an Indexed Job of 4 pods, each driving its shard of\n\
         # the study's step load (2 minutes) at the gateway and printing its record as the\n\
         # last line of its log. Written by `k8s-harness loadgen` from the Job `loadtest\n\
         # tune --load-pods` creates (a test keeps them equal); edit that, not this.\n{yaml}"
    ))
}

/// The repository's `k8s/` directory.
pub fn k8s_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The project's root (`k8s/..`).
pub fn repo_root() -> PathBuf {
    k8s_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Every overlay a user applies, relative to `k8s/overlays`: one per stage, the same
/// stages with the emulator under `local/`, and `production`.
pub fn overlays() -> Vec<String> {
    overlays_of(&dronelab_study::stages::builtin().unwrap_or_default())
}

fn overlays_of(stages: &[dronelab_study::Stage]) -> Vec<String> {
    let mut out: Vec<String> = stages.iter().map(|s| s.name.clone()).collect();
    out.extend(stages.iter().map(|s| format!("local/{}", s.name)));
    out.push("production".into());
    out
}

/// Renders every overlay of `overlays_dir` (see [`overlays`]), checks each against the
/// contract and the stage it stands for, and returns every problem, prefixed with the
/// overlay. `each` sees every render (for a summary).
pub fn check_overlays(
    overlays_dir: &Path,
    mut each: impl FnMut(&str, &render::Manifests),
) -> Result<Vec<String>, render::RenderError> {
    let stages = dronelab_study::stages::builtin().unwrap_or_default();
    let model = dronelab_study::EmulatorModel::default();
    let mut problems = Vec::new();
    let mut present: Vec<String> = Vec::new();
    for dir in [overlays_dir.to_path_buf(), overlays_dir.join("local")] {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.path().join("kustomization.yaml").is_file() {
                let relative = entry
                    .path()
                    .strip_prefix(overlays_dir)
                    .map(Path::to_path_buf);
                present.extend(relative.ok().map(|r| r.display().to_string()));
            }
        }
    }
    let expected = overlays_of(&stages);
    for overlay in &expected {
        if !present.contains(overlay) {
            problems.push(format!("{overlay}: overlay missing"));
            continue;
        }
        let manifests = render::render(&overlays_dir.join(overlay))?;
        each(overlay, &manifests);
        let mut found = contract::check(&manifests);
        let stage_name = overlay.trim_start_matches("local/");
        if let Some(stage) = stages.iter().find(|s| s.name == stage_name) {
            found.extend(contract::check_stage(&manifests, stage, &model));
        }
        problems.extend(found.into_iter().map(|p| format!("{overlay}: {p}")));
    }
    for extra in present.iter().filter(|p| !expected.contains(p)) {
        problems.push(format!(
            "{extra}: an overlay with no stage file (loadtest/stages/)"
        ));
    }
    Ok(problems)
}

/// The antipattern lab's overlays: for every `<kind>` directory of stage files under
/// `lab_stages` (`loadtest/stages/antipatterns`), one overlay per stage at
/// `<overlays_dir>/antipatterns/<kind>/<stage>`, each checked against the contract and
/// its stage file (the query knobs and every lab knob). Returns the problems and how
/// many overlays were checked.
pub fn check_lab_overlays(
    overlays_dir: &Path,
    lab_stages: &Path,
) -> Result<(Vec<String>, usize), render::RenderError> {
    let model = dronelab_study::EmulatorModel::default();
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut kinds: Vec<_> = std::fs::read_dir(lab_stages)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    kinds.sort();
    for kind_dir in kinds {
        let kind = kind_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stages = match dronelab_study::stages::from_dir(&kind_dir) {
            Ok(stages) => stages,
            Err(e) => {
                problems.push(format!("antipatterns/{kind}: {e}"));
                continue;
            }
        };
        for stage in &stages {
            let overlay = format!("antipatterns/{kind}/{}", stage.name);
            let dir = overlays_dir.join(&overlay);
            if !dir.join("kustomization.yaml").is_file() {
                problems.push(format!("{overlay}: overlay missing"));
                continue;
            }
            let manifests = render::render(&dir)?;
            let mut found = contract::check(&manifests);
            found.extend(contract::check_stage(&manifests, stage, &model));
            problems.extend(found.into_iter().map(|p| format!("{overlay}: {p}")));
            checked += 1;
        }
    }
    Ok((problems, checked))
}
