//! The dronelab image built where no base image can be pulled: the same `Dockerfile`
//! users build, with two local stand-ins — binaries compiled on this host (its `prebuilt`
//! target) and, as `RUNTIME_IMAGE`, a runtime base made from scratch with exactly what the
//! binaries load: their shared libraries and loader, CA certificates, and the non-root
//! user 65532, as distroless `cc` has them.

use std::path::{Path, PathBuf};

use dronelab_contract::Service;

use crate::podman::{Lab, PodmanError};

/// The binaries the image holds (the `Dockerfile` builds the same list).
pub const BINARIES: [&str; 7] = [
    Service::Gateway.name(),
    Service::Delivery.name(),
    Service::Package.name(),
    Service::Utilization.name(),
    Service::CosmosEmulator.name(),
    Service::TraceViewer.name(),
    "loadtest",
];

const CA_CERTIFICATES: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The `Dockerfile`'s title label, on every dronelab image.
const IMAGE_LABEL: &str = "org.opencontainers.image.title=dronelab";
/// The label of the runtime base made here.
const BASE_LABEL: &str = "org.opencontainers.image.title=dronelab-runtime-base";

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{0}")]
    Io(String),
    #[error("binary {0} not found (build with `cargo build --profile dist --locked`)")]
    MissingBinary(String),
    #[error(transparent)]
    Podman(#[from] PodmanError),
}

fn io(what: &str) -> impl Fn(std::io::Error) -> ImageError + '_ {
    move |e| ImageError::Io(format!("{what}: {e}"))
}

/// Sizes of what was built.
#[derive(Debug, Clone)]
pub struct Built {
    pub base: String,
    pub image: String,
    pub base_bytes: u64,
    pub image_bytes: u64,
}

/// Builds `localhost/dronelab-runtime-base:<tag>` and `localhost/dronelab:<tag>` from
/// the binaries in `binaries_dir`.
pub async fn build(lab: &Lab, binaries_dir: &Path, tag: &str) -> Result<Built, ImageError> {
    let work = tempfile::tempdir().map_err(io("temporary directory"))?;
    let bins: Vec<PathBuf> = BINARIES.iter().map(|b| binaries_dir.join(b)).collect();
    if let Some(missing) = bins.iter().find(|b| !b.is_file()) {
        return Err(ImageError::MissingBinary(missing.display().to_string()));
    }

    let base = format!("localhost/dronelab-runtime-base:{tag}");
    let base_context = work.path().join("base");
    let rootfs = base_context.join("rootfs");
    for library in shared_libraries(&bins).await? {
        copy_into(&rootfs, &library)?;
    }
    copy_into(&rootfs, Path::new(CA_CERTIFICATES))?;
    let etc = rootfs.join("etc");
    std::fs::write(
        etc.join("passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )
    .map_err(io("passwd"))?;
    std::fs::write(etc.join("group"), "root:x:0:\nnonroot:x:65532:\n").map_err(io("group"))?;
    std::fs::write(
        base_context.join("Containerfile"),
        format!("FROM scratch\nCOPY rootfs/ /\nLABEL {BASE_LABEL}\n"),
    )
    .map_err(io("Containerfile"))?;
    lab.podman([
        "build",
        "--quiet",
        "--tag",
        &base,
        &base_context.display().to_string(),
    ])
    .await?;

    let image = format!("localhost/dronelab:{tag}");
    let context = work.path().join("image");
    let bin = context.join("bin");
    std::fs::create_dir_all(&bin).map_err(io("bin"))?;
    for path in &bins {
        let name = path.file_name().unwrap_or_default();
        let copy = bin.join(name);
        std::fs::copy(path, &copy).map_err(io("copying a binary"))?;
        strip(&copy).await;
    }
    let dockerfile = crate::repo_root().join("Dockerfile");
    lab.podman([
        "build".to_owned(),
        "--quiet".into(),
        "--file".into(),
        dockerfile.display().to_string(),
        "--target".into(),
        "prebuilt".into(),
        "--build-arg".into(),
        format!("RUNTIME_IMAGE={base}"),
        "--tag".into(),
        image.clone(),
        context.display().to_string(),
    ])
    .await?;
    // Each build leaves the previous images untagged: remove those of ours, so repeated
    // proofs on one machine do not fill its disk.
    for label in [IMAGE_LABEL, BASE_LABEL] {
        lab.podman([
            "image",
            "prune",
            "--force",
            "--filter",
            &format!("label={label}"),
        ])
        .await?;
    }
    Ok(Built {
        base_bytes: size(lab, &base).await,
        image_bytes: size(lab, &image).await,
        base,
        image,
    })
}

async fn size(lab: &Lab, image: &str) -> u64 {
    lab.podman(["image", "inspect", "--format", "{{.Size}}", image])
        .await
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// What the user's build does with `CARGO_PROFILE_RELEASE_STRIP=symbols`; without
/// `strip` on the machine the binaries stay as they are.
async fn strip(binary: &Path) {
    let _ = tokio::process::Command::new("strip")
        .arg(binary)
        .status()
        .await;
}

/// Every shared object the binaries load, from `ldd`, with the loader.
async fn shared_libraries(binaries: &[PathBuf]) -> Result<Vec<PathBuf>, ImageError> {
    let mut libraries = std::collections::BTreeSet::new();
    for binary in binaries {
        let output = tokio::process::Command::new("ldd")
            .arg(binary)
            .output()
            .await
            .map_err(io("ldd"))?;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux… (0x…)"
            let path = match line.split_once("=>") {
                Some((_, target)) => target.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            if let Some(path) = path.filter(|p| p.starts_with('/')) {
                libraries.insert(PathBuf::from(path));
            }
        }
    }
    Ok(libraries.into_iter().collect())
}

/// Copies `path` (following links) to the same path under `root`.
fn copy_into(root: &Path, path: &Path) -> Result<(), ImageError> {
    let relative = path.strip_prefix("/").unwrap_or(path);
    let target = root.join(relative);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(io("rootfs"))?;
    }
    std::fs::copy(path, &target).map_err(io(&path.display().to_string()))?;
    Ok(())
}
