//! Child processes for tests: a command's output, scratch files, signals, and a
//! child whose stderr lines are read until one says what the test waits for.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc::UnboundedReceiver;

/// How long a child may take to print an awaited line or to exit after a signal.
pub const PROCESS_WAIT: Duration = Duration::from_secs(20);

/// Runs a command to its end and returns what it printed on stdout; fails the test,
/// showing its stderr, when it does not exit 0.
pub fn stdout_of(command: &mut std::process::Command) -> Vec<u8> {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?} exited {}:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A fresh directory `<name>-<pid>` under the system's temporary one, and the path
/// of `file` in it (not written).
pub fn scratch_file(name: &str, file: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    (dir, path)
}

/// `serve.toml` holding `text` in a fresh scratch directory `name`: the directory
/// and the file.
pub fn serve_toml(name: &str, text: &str) -> (PathBuf, PathBuf) {
    let (dir, path) = scratch_file(name, "serve.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// Sends signal `name` (`TERM`, `HUP`, `INT`, `KILL`) to `child`.
pub fn signal(child: &tokio::process::Child, name: &str) {
    use rustix::process::{Pid, Signal, kill_process};
    let id = child.id().expect("the child runs");
    let signal = match name {
        "TERM" => Signal::TERM,
        "HUP" => Signal::HUP,
        "INT" => Signal::INT,
        "KILL" => Signal::KILL,
        other => panic!("no signal {other} here"),
    };
    let pid =
        Pid::from_raw(i32::try_from(id).expect("a pid fits i32")).expect("a child's pid is not 0");
    kill_process(pid, signal).unwrap_or_else(|e| panic!("kill -{name} {id}: {e}"));
}

/// Stops `child` as its own shutdown would: SIGTERM, then SIGKILL if it has not
/// exited within `grace` (checked every 10 ms), then waits for it. A daemon with
/// processes of its own (nginx's master and workers) takes them down on SIGTERM;
/// SIGKILL of the master alone leaves its workers running, holding the port.
pub fn stop_blocking(child: &mut std::process::Child, grace: std::time::Duration) {
    use rustix::process::{Pid, Signal, kill_process};
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .expect("a child's pid fits i32 and is not 0");
    let _ = kill_process(pid, Signal::TERM);
    let checks = grace.as_millis() / 10;
    for _ in 0..checks {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Every line `child` writes on stderr, forwarded as it comes (which also keeps the
/// pipe drained); the child must have been spawned with a piped stderr.
fn stderr_lines(child: &mut tokio::process::Child) -> UnboundedReceiver<String> {
    let (lines_tx, lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stderr = child.stderr.take().expect("stderr is piped");
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// A child whose stderr is read line by line: a test waits for the line it needs,
/// signals the child, and reads on until it exits, with every line kept for the
/// failure message. Killed when dropped.
pub struct Watched {
    pub child: tokio::process::Child,
    lines: UnboundedReceiver<String>,
    /// Every stderr line read so far, in order.
    pub seen: Vec<String>,
}

impl Watched {
    /// Watches `child`, which must have been spawned with a piped stderr.
    pub fn new(mut child: tokio::process::Child) -> Watched {
        let lines = stderr_lines(&mut child);
        Watched {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next stderr line for which `wanted` holds (within [`PROCESS_WAIT`]);
    /// fails the test, showing what was seen, when the child ends or the wait
    /// passes first.
    pub async fn line_where(&mut self, mut wanted: impl FnMut(&str) -> bool) -> String {
        let (lines, seen) = (&mut self.lines, &mut self.seen);
        let found = tokio::time::timeout(PROCESS_WAIT, async {
            while let Some(line) = lines.recv().await {
                seen.push(line.clone());
                if wanted(&line) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            Ok(None) => panic!(
                "the process ended first; lines seen:\n{}",
                self.seen.join("\n")
            ),
            Err(_) => panic!(
                "no such line in time; lines seen:\n{}",
                self.seen.join("\n")
            ),
        }
    }

    /// Sends `name` (`TERM`, `HUP`, `INT`).
    pub fn signal(&self, name: &str) {
        signal(&self.child, name);
    }

    /// SIGTERM, then every line up to the exit, and the exit status (both within
    /// [`PROCESS_WAIT`]).
    pub async fn terminate(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.exit().await
    }

    /// Reads every line up to the exit and returns the exit status (within
    /// [`PROCESS_WAIT`]).
    pub async fn exit(&mut self) -> ExitStatus {
        let (lines, seen) = (&mut self.lines, &mut self.seen);
        let drained = tokio::time::timeout(PROCESS_WAIT, async {
            while let Some(line) = lines.recv().await {
                seen.push(line);
            }
        })
        .await;
        assert!(
            drained.is_ok(),
            "the process did not end; lines seen:\n{}",
            self.seen.join("\n")
        );
        tokio::time::timeout(PROCESS_WAIT, self.child.wait())
            .await
            .expect("the process exits once its stderr is closed")
            .unwrap()
    }

    /// [`terminate`](Self::terminate), and fails the test unless it exits 0.
    pub async fn stop(&mut self) {
        let status = self.terminate().await;
        assert!(
            status.success(),
            "exited {status}; lines seen:\n{}",
            self.seen.join("\n")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::stop_blocking;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    #[test]
    fn a_child_is_stopped_by_sigterm() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        stop_blocking(&mut child, Duration::from_secs(5));
        let status = child.try_wait().unwrap().expect("it has exited");
        assert_eq!(status.signal(), Some(15), "SIGTERM ended it: {status}");
    }

    #[test]
    fn a_child_that_ignores_sigterm_is_killed_after_the_grace() {
        // The shell ignores TERM, and so does the `sleep` it runs (an ignored
        // signal stays ignored across exec); `exec` makes the sleep the child.
        let mut child = Command::new("sh")
            .args(["-c", "trap '' TERM; echo trapped; exec sleep 30"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The trap is set once the shell says so.
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        assert_eq!(line, "trapped\n");
        stop_blocking(&mut child, Duration::from_millis(100));
        let status = child.try_wait().unwrap().expect("it has exited");
        assert_eq!(status.signal(), Some(9), "SIGKILL ended it: {status}");
    }
}
