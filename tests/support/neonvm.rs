//! NeonVM's real controller beside the tests: `neonvm-controller`, built from NeonVM's own
//! source by `scripts/control-plane build` into `$NEONVM_ASSETS` together with NeonVM's CRDs
//! (`scripts/control-plane run` sets the variable). The project keeps only its stubs
//! (`tests/neonvm-stubs/`: a CertificateRequest CRD, the two NetworkAttachmentDefinitions).
//!
//! A test takes a [`NeonVm`]: the first one installs NeonVM's CRDs and the stubs, gives the
//! kwok nodes NeonVM's device resources and starts the controller; the tests running at the
//! same time share it; when the last one ends (also by a panic), its VMs and their runner
//! pods are deleted, the controller is stopped, and NeonVM's CRDs and the nodes' devices are
//! removed again, so the cluster is one without NeonVM for what runs next. The controller
//! runs under a shell that stops it when its stdin closes, which the kernel does when the
//! test process ends in any way (killed, a SIGKILL too): it never outlives the test process.
//! (Only then, with nothing left to clean up, NeonVM's CRDs stay until the control plane
//! stops; a test process killed fails the run anyway.)

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::wait::conditions;
use serde_json::json;

use super::{REPO, WAIT, client, free_port, http_get, kubectl, kubectl_ok, wait_for, wait_until};

/// The runner image the controller puts in VMs that name none (its `VM_RUNNER_IMAGE`).
pub const RUNNER_IMAGE: &str = "registry.test/neondatabase/neonvm-runner:test-bed";

/// Its webhook server's port: fixed (and on every address), so one controller at a time.
const WEBHOOK_PORT: u16 = 9443;

/// NeonVM's VirtualMachineMigration and VirtualMachine, by full name: imagemap has a
/// `virtualmachines` of its own.
const NEONVM_KINDS: [&str; 2] = [
    "virtualmachinemigrations.vm.neon.tech",
    "virtualmachines.vm.neon.tech",
];

/// `vm.neon.tech/v1` VirtualMachine.
pub fn vm_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("vm.neon.tech", "v1", "VirtualMachine"),
        "virtualmachines",
    )
}

/// A share of the running controller (see the module's documentation).
pub struct NeonVm {
    /// The controller's output.
    log: PathBuf,
}

/// The controller and how many [`NeonVm`]s share it.
static SHARED: Mutex<Option<(usize, Controller)>> = Mutex::new(None);

fn shared() -> MutexGuard<'static, Option<(usize, Controller)>> {
    SHARED.lock().unwrap_or_else(PoisonError::into_inner)
}

impl NeonVm {
    /// Joins the running controller, or installs NeonVM and starts one and waits until it
    /// answers its readiness probe.
    pub async fn start() -> NeonVm {
        static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one_at_a_time = STARTING.lock().await;
        if let Some((users, controller)) = shared().as_mut() {
            *users += 1;
            return NeonVm {
                log: controller.log(),
            };
        }
        let controller = Controller::start().await;
        let log = controller.log();
        *shared() = Some((1, controller));
        NeonVm { log }
    }

    /// What the controller logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NeonVm {
    fn drop(&mut self) {
        let mut shared = shared();
        let last = shared.as_mut().is_some_and(|(users, _)| {
            *users -= 1;
            *users == 0
        });
        if last {
            // Stopped while the lock is held: a test starting meanwhile waits for a clean
            // cluster before it installs NeonVM again.
            drop(shared.take());
        }
    }
}

/// The running controller: the shell that runs it, that shell's stdin, its files.
struct Controller {
    shell: Option<Child>,
    stdin: Option<ChildStdin>,
    /// Its `TMPDIR` (the webhook server's certificate), its log and pid file.
    dir: PathBuf,
    /// The CRD manifests applied: NeonVM's and the stub.
    crds: Vec<PathBuf>,
    health_port: u16,
}

/// Runs the command given as arguments until it exits or this shell's stdin reaches its end
/// (the test process closed it or ended), then stops it (SIGTERM). Exits when it exits.
const SUPERVISOR: &str = r#"
exec 3<&0
"$@" </dev/null 3<&- &
pid=$!
echo "$pid" >"$TMPDIR/controller.pid"
{ cat <&3 >/dev/null; kill "$pid" 2>/dev/null; } &
exec 3<&-
wait "$pid"
"#;

impl Controller {
    async fn start() -> Controller {
        let assets = PathBuf::from(std::env::var_os("NEONVM_ASSETS").expect(
            "NEONVM_ASSETS is not set: run the tests through scripts/control-plane run (as \
             scripts/test does), which builds neonvm-controller from NeonVM's source",
        ));
        let binary = assets.join("neonvm-controller");
        assert!(
            binary.is_file(),
            "{} is missing: scripts/control-plane build builds it",
            binary.display()
        );
        wait_until(
            WAIT,
            &format!("port {WEBHOOK_PORT} (neonvm-controller's webhook server) free"),
            || std::net::TcpStream::connect(("127.0.0.1", WEBHOOK_PORT)).is_err(),
        )
        .await;

        let dir = std::env::temp_dir().join(format!("neonvm-controller-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut crds: Vec<PathBuf> = std::fs::read_dir(assets.join("crds"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        crds.sort();
        crds.push(Path::new(REPO).join("tests/neonvm-stubs/certificaterequests-crd.yaml"));
        // From here on, dropping it (also on a panic) removes what was installed.
        let mut controller = Controller {
            shell: None,
            stdin: None,
            dir,
            crds,
            health_port: free_port(),
        };
        controller.install().await;
        controller.spawn(&binary);
        controller.wait_ready().await;
        controller
    }

    /// NeonVM's CRDs and the stubs, and the nodes' device resources.
    async fn install(&self) {
        let client = client().await;
        // Server-side: the VirtualMachine CRD is too large for the last-applied annotation.
        let mut args = vec!["apply", "--server-side", "-o", "name"];
        for crd in &self.crds {
            args.extend(["-f", crd.to_str().unwrap()]);
        }
        let applied = kubectl_ok(&args);
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for name in applied
            .lines()
            .filter_map(|l| l.split_once('/'))
            .map(|l| l.1)
        {
            wait_for(crds.clone(), name, conditions::is_crd_established()).await;
        }
        kubectl_ok(&["apply", "-f", "tests/neonvm-stubs/networks.yaml"]);

        // Runner pods ask for one of each; kwok keeps what a status patch gives its nodes.
        let nodes: Api<Node> = Api::all(client);
        let devices = json!({"neonvm/kvm": "100", "neonvm/vhost-net": "100"});
        let status = json!({"status": {"capacity": devices, "allocatable": devices}});
        let labels = json!({"metadata": {"labels": {"kubernetes.io/os": "linux"}}});
        for node in nodes.list(&ListParams::default()).await.unwrap() {
            let name = node.metadata.name.unwrap();
            let params = PatchParams::default();
            nodes
                .patch_status(&name, &params, &Patch::Merge(&status))
                .await
                .unwrap();
            nodes
                .patch(&name, &params, &Patch::Merge(&labels))
                .await
                .unwrap();
        }
    }

    /// Writes the webhook server's certificate and starts the controller under
    /// [`SUPERVISOR`], its output in `controller.log`.
    fn spawn(&mut self, binary: &Path) {
        let certs = self.dir.join("k8s-webhook-server/serving-certs");
        std::fs::create_dir_all(&certs).unwrap();
        let made = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=neonvm-controller",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-keyout",
                certs.join("tls.key").to_str().unwrap(),
                "-out",
                certs.join("tls.crt").to_str().unwrap(),
            ])
            .output()
            .expect("openssl");
        assert!(
            made.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        let log = File::create(self.log()).unwrap();
        let mut shell = Command::new("sh")
            .args(["-c", SUPERVISOR, "sh"])
            .arg(binary)
            .args([
                // Required: left empty, the controller writes a value the CRD refuses.
                "--default-cpu-scaling-mode=QmpScaling",
                "--disable-runner-cgroup",
                "--concurrency-limit=8",
                &format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
                &format!("--health-probe-bind-address=127.0.0.1:{}", self.health_port),
            ])
            .env("TMPDIR", &self.dir)
            .env("VM_RUNNER_IMAGE", RUNNER_IMAGE)
            .env("NAD_IPAM_NAME", "neonvm-overlay-ipam")
            .env("NAD_IPAM_NAMESPACE", "neonvm-system")
            .env("NAD_RUNNER_NAME", "neonvm-overlay-for-vms")
            .env("NAD_RUNNER_NAMESPACE", "neonvm-system")
            .stdin(Stdio::piped())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("sh runs neonvm-controller");
        self.stdin = shell.stdin.take();
        self.shell = Some(shell);
    }

    async fn wait_ready(&mut self) {
        let port = self.health_port;
        let deadline = Instant::now() + WAIT;
        while http_get(port, "/readyz").map(|r| r.0) != Some(200) {
            assert!(self.running(), "neonvm-controller exited:\n{}", self.logs());
            assert!(
                Instant::now() < deadline,
                "neonvm-controller not ready within {WAIT:?}:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn running(&mut self) -> bool {
        self.shell
            .as_mut()
            .is_some_and(|s| s.try_wait().unwrap().is_none())
    }

    fn log(&self) -> PathBuf {
        self.dir.join("controller.log")
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    /// Stops the controller: SIGTERM through its shell, SIGKILL if it is still there after
    /// 30 s.
    fn stop(&mut self) {
        drop(self.stdin.take());
        let Some(mut shell) = self.shell.take() else {
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while shell.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if shell.try_wait().unwrap().is_none() {
            if let Ok(pid) = std::fs::read_to_string(self.dir.join("controller.pid")) {
                let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
            }
            let _ = shell.wait();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        // VMs first, while the controller runs: it takes its finalizer off them.
        if self.running() {
            kubectl(&[
                "delete",
                &NEONVM_KINDS.join(","),
                "--all",
                "--all-namespaces",
                "--ignore-not-found",
                "--timeout=60s",
            ]);
        }
        self.stop();
        // What the controller did not finish (it had stopped): finalizers taken off by hand.
        for kind in NEONVM_KINDS {
            for o in objects(kind) {
                let (namespace, name) = (o.metadata.namespace.unwrap(), o.metadata.name.unwrap());
                let unfinalized = r#"{"metadata":{"finalizers":null}}"#;
                kubectl(&[
                    "patch",
                    "-n",
                    &namespace,
                    kind,
                    &name,
                    "--type=merge",
                    "-p",
                    unfinalized,
                ]);
            }
        }
        // Runner pods: no garbage collector runs in the test control plane.
        for o in objects("pods") {
            let owners = o.metadata.owner_references.unwrap_or_default();
            if owners
                .iter()
                .any(|r| r.api_version.starts_with("vm.neon.tech/"))
            {
                let (namespace, name) = (o.metadata.namespace.unwrap(), o.metadata.name.unwrap());
                kubectl(&["delete", "pod", "-n", &namespace, &name, "--timeout=60s"]);
            }
        }
        let mut args = vec!["delete", "--ignore-not-found", "--timeout=60s"];
        for crd in &self.crds {
            args.extend(["-f", crd.to_str().unwrap()]);
        }
        kubectl(&args);
        // The nodes' NeonVM devices go too (their kubernetes.io/os label stays: kubelets set it).
        let devices = json!({"neonvm/kvm": null, "neonvm/vhost-net": null});
        let status = json!({"status": {"capacity": devices, "allocatable": devices}}).to_string();
        for node in objects("nodes") {
            let name = node.metadata.name.unwrap();
            kubectl(&[
                "patch",
                "node",
                &name,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status,
            ]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(serde::Deserialize)]
struct Object {
    metadata: kube::api::ObjectMeta,
}

/// Every object of `resource`, in all namespaces (none if it is not served).
fn objects(resource: &str) -> Vec<Object> {
    #[derive(serde::Deserialize)]
    struct List {
        items: Vec<Object>,
    }
    let out = kubectl(&["get", resource, "--all-namespaces", "-o", "json"]);
    serde_json::from_slice::<List>(&out.stdout).map_or_else(|_| Vec::new(), |l| l.items)
}
