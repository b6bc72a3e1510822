//! A private PostgreSQL server per test: `initdb` into a temporary
//! directory, `postgres` on a free port with its socket in that directory,
//! stopped (fast) on drop. As root, both run as the `postgres` user, since
//! PostgreSQL refuses to run as root. [`Postgres::start_tls`] starts one
//! that offers TLS with a given certificate.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The directory of Debian's PostgreSQL binaries (the newest installed).
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed (scripts/setup.sh installs it)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("a PostgreSQL version under /usr/lib/postgresql")
}

fn is_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
    })
}

/// A command for PostgreSQL's binaries, as `postgres` when we are root.
fn pg_command(program: &str) -> Command {
    let path = bin_dir().join(program);
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(path);
        c
    } else {
        Command::new(path)
    }
}

pub struct Postgres {
    dir: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
    /// `-c` settings of the server beyond the defaults (TLS).
    settings: Vec<String>,
}

impl Postgres {
    /// A new cluster, started.
    pub fn start() -> Postgres {
        let mut pg = Postgres::init();
        pg.start_server();
        pg
    }

    /// A new cluster offering TLS (`ssl=on`) with the PEM certificate and
    /// key given, which are copied where the server can read them (the key
    /// owned by the server's user, mode 0600, as PostgreSQL demands).
    pub fn start_tls(cert: &Path, key: &Path) -> Postgres {
        let mut pg = Postgres::init();
        let (cert_at, key_at) = (
            pg.dir.path().join("server.crt"),
            pg.dir.path().join("server.key"),
        );
        std::fs::copy(cert, &cert_at).expect("copy the certificate");
        std::fs::copy(key, &key_at).expect("copy the key");
        std::fs::set_permissions(&key_at, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("chmod the key");
        if is_root() {
            let status = Command::new("chown")
                .args(["postgres:postgres"])
                .args([&cert_at, &key_at])
                .status()
                .unwrap();
            assert!(status.success(), "chown of the TLS files");
        }
        pg.settings = vec![
            "ssl=on".into(),
            format!("ssl_cert_file={}", cert_at.display()),
            format!("ssl_key_file={}", key_at.display()),
        ];
        pg.start_server();
        pg
    }

    /// A new cluster, initialised and not started.
    fn init() -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("rankflow-pg")
            .tempdir()
            .unwrap();
        if is_root() {
            let status = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success(), "chown of the data directory");
        }
        let out = pg_command("initdb")
            .arg("-D")
            .arg(data_dir(dir.path()))
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Postgres {
            dir,
            port: super::free_port(),
            child: None,
            settings: Vec::new(),
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again) on the same port and data.
    pub fn start_server(&mut self) {
        // The server's log, to say why it did not start.
        let log_path = self.dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).expect("server log");
        let mut child = pg_command("postgres")
            .arg("-D")
            .arg(data_dir(self.dir.path()))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "full_page_writes=off", "-c", "synchronous_commit=off"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = pg_command("pg_isready")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                self.child = Some(child);
                return;
            }
            let exited = child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let _ = child.kill();
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!("PostgreSQL did not start ({exited:?}):\n{log}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server (fast shutdown: open transactions roll back).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = pg_command("pg_ctl")
                .arg("stop")
                .arg("-D")
                .arg(data_dir(self.dir.path()))
                .args(["-m", "fast", "-w"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn data_dir(dir: &Path) -> PathBuf {
    dir.join("data")
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}
