//! A private PostgreSQL server per test: `initdb` into a temporary
//! directory, `postgres` on a free port with its socket in that directory,
//! stopped (fast) on drop. As root, both run as the `postgres` user, since
//! PostgreSQL refuses to run as root.

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
}

impl Postgres {
    /// A new cluster, started.
    pub fn start() -> Postgres {
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
        let mut pg = Postgres {
            dir,
            port: super::free_port(),
            child: None,
        };
        pg.start_server();
        pg
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again) on the same port and data.
    pub fn start_server(&mut self) {
        let child = pg_command("postgres")
            .arg("-D")
            .arg(data_dir(self.dir.path()))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "full_page_writes=off", "-c", "synchronous_commit=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = pg_command("pg_isready")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "PostgreSQL did not start");
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
