//! What the proxy tests run: the upstream payment service (`upstream.py`, a child process), the
//! `idemdb proxy` under test (a child process), a plain HTTP/1.1 client over `std::net::TcpStream`
//! (raw sockets, so that a test can send a header twice or trickle a request byte by byte), a
//! schema of the suite's PostgreSQL per test, and a TCP relay in front of PostgreSQL that can cut
//! the database away. Every child is SIGKILLed when its guard is dropped, and a failing test prints
//! the end of each child's stderr.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary under test.
pub const IDEMDB: &str = env!("CARGO_BIN_EXE_idemdb");

/// A Standard Webhooks delivery of event `id` with `body` to `/payments`, signed `ago` seconds
/// ago by `secret`.
pub fn webhook_delivery(id: &str, body: &str, secret: &str, ago: i64) -> Req {
    use base64::Engine as _;
    use hmac::Mac as _;
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - ago;
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{at}.{body}").as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    Req::post("/payments")
        .header("Content-Type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", &at.to_string())
        .header("webhook-signature", &format!("v1,{sig}"))
        .body(body)
}

/// How long a child gets to say it is listening (a PostgreSQL proxy connects and migrates first;
/// the machine may be at load 4 on 2 cores).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// How long the client waits for any one answer before failing the test.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(90);

/// Polls `f` every 20 ms until it returns `Some`, for at most `within`; the panic names `what`.
pub fn wait_until<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("waited {within:?} for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn pause(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

// ------------------------------------------------------------------------------------------------
// Child processes

/// A child process, SIGKILLed and reaped when dropped; its stderr is kept for failure messages.
pub struct Running {
    name: String,
    child: std::process::Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    stdout_lines: mpsc::Receiver<String>,
    exited: Option<ExitStatus>,
}

impl Running {
    /// Starts `cmd` with its stdout read line by line and its stderr kept.
    fn spawn(name: &str, mut cmd: Command) -> Running {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut err = child.stderr.take().expect("piped stderr");
        let keep = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                keep.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Once nobody reads any more, go on draining so that the child never blocks.
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Running {
            name: name.to_owned(),
            child,
            stderr,
            stdout_lines: rx,
            exited: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// The child's next stdout line, waiting at most `within`; the panic names `what` and shows the
    /// child's stderr (and its exit status if it exited).
    fn next_line(&mut self, within: Duration, what: &str) -> String {
        match self.stdout_lines.recv_timeout(within) {
            Ok(line) => line,
            Err(e) => {
                let status = self.child.try_wait().ok().flatten();
                panic!(
                    "waited {within:?} for {} to print {what} ({e}); exit status {status:?}; \
                     its stderr:\n{}",
                    self.name,
                    self.stderr()
                )
            }
        }
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            self.exited = Some(self.child.wait().expect("reap a killed child"));
        }
    }

    /// SIGTERM (through kill(1): the standard library sends only SIGKILL).
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill -TERM");
        assert!(status.success(), "kill -TERM {} failed", self.child.id());
    }

    /// Waits at most `within` for the child to exit by itself; the panic names `what`.
    pub fn wait_exit(&mut self, within: Duration, what: &str) -> ExitStatus {
        if let Some(s) = self.exited {
            return s;
        }
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                self.exited = Some(s);
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "waited {within:?} for {} to exit ({what}); its stderr:\n{}",
                    self.name,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let err = self.stderr();
            let tail = &err[err.len().saturating_sub(6000)..];
            eprintln!("--- the end of {}'s stderr ---\n{tail}\n---", self.name);
        }
    }
}

/// Runs a command that exits by itself (at most 60 s): its status, stdout and stderr.
pub fn run(name: &str, cmd: Command) -> (ExitStatus, String, String) {
    let mut child = Running::spawn(name, cmd);
    let status = child.wait_exit(Duration::from_secs(60), "it to finish");
    // The readers get EOF once the child is gone; give them a bounded moment to hand it over.
    let mut out = String::new();
    while let Ok(line) = child.stdout_lines.recv_timeout(Duration::from_secs(10)) {
        out.push_str(&line);
        out.push('\n');
    }
    let err = wait_until(
        Duration::from_secs(10),
        "the child's stderr to close",
        || (Arc::strong_count(&child.stderr) == 1).then(|| child.stderr()),
    );
    (status, out, err)
}

// ------------------------------------------------------------------------------------------------
// The upstream payment service

/// `upstream.py`: a payment service without idempotency of its own (see its docstring).
pub struct Upstream {
    proc: Option<Running>,
    pub port: u16,
    pub effects: PathBuf,
    /// `--jwt-secret`: the HMAC secret its `/orders` verifies callers' tokens with.
    jwt_secret: Option<PathBuf>,
}

/// One line of the effects file: `payment <n> <account> <amount> <key>` or `big <n> <bytes> <key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub kind: String,
    pub n: u64,
    /// The account (`payment`) or the body's size (`big`).
    pub what: String,
    pub key: String,
    pub line: String,
}

impl Upstream {
    /// Starts the upstream on a free port, its effects in `dir/effects` (kept across restarts).
    pub fn start(dir: &Path) -> Upstream {
        Upstream::start_on(dir, 0)
    }

    /// As [`Upstream::start`], on `port` (0: a free one).
    pub fn start_on(dir: &Path, port: u16) -> Upstream {
        let mut u = Upstream {
            proc: None,
            port,
            effects: dir.join("effects"),
            jwt_secret: None,
        };
        u.launch();
        u
    }

    /// As [`Upstream::start`], its `/orders` verifying HS256 tokens under the secret in `secret`.
    pub fn start_verifying(dir: &Path, secret: &Path) -> Upstream {
        let mut u = Upstream {
            proc: None,
            port: 0,
            effects: dir.join("effects"),
            jwt_secret: Some(secret.to_owned()),
        };
        u.launch();
        u
    }

    fn launch(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxy/upstream.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script)
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--effects")
            .arg(&self.effects);
        if let Some(secret) = &self.jwt_secret {
            cmd.arg("--jwt-secret").arg(secret);
        }
        let mut proc = Running::spawn("the upstream (python3 tests/proxy/upstream.py)", cmd);
        let line = proc.next_line(READY_WITHIN, "`listening on PORT`");
        let port: u16 = line
            .strip_prefix("listening on ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the upstream printed {line:?}, not `listening on PORT`"));
        if self.port != 0 {
            assert_eq!(port, self.port, "the upstream restarts on its port");
        }
        self.port = port;
        self.proc = Some(proc);
    }

    /// `http://127.0.0.1:PORT`, for `--upstream`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILLs the upstream (requests it is serving are cut off where they are).
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Starts it again on the same port, with the same effects file.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Every effect performed so far, in order.
    pub fn effects(&self) -> Vec<Effect> {
        let text = match std::fs::read_to_string(&self.effects) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => panic!("read {}: {e}", self.effects.display()),
        };
        text.lines()
            .filter(|l| !l.is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                Effect {
                    kind: f[0].to_owned(),
                    n: f[1].parse().expect("effect number"),
                    what: f[2].to_owned(),
                    key: f.last().expect("key field").to_string(),
                    line: l.to_owned(),
                }
            })
            .collect()
    }

    /// The `payment` effects of `account`.
    pub fn payments_of(&self, account: &str) -> Vec<Effect> {
        self.effects()
            .into_iter()
            .filter(|e| e.kind == "payment" && e.what == account)
            .collect()
    }

    /// Waits (at most 60 s) until at least `n` effects are in the file; the panic names `what`.
    pub fn wait_for_effects(&self, n: usize, what: &str) -> Vec<Effect> {
        wait_until(
            Duration::from_secs(60),
            &format!("{n} effects in the upstream's file ({what})"),
            || {
                let e = self.effects();
                (e.len() >= n).then_some(e)
            },
        )
    }
}

// ------------------------------------------------------------------------------------------------
// The proxy under test

/// Where a proxy keeps its records.
#[derive(Clone, Debug)]
pub enum Store {
    Db(PathBuf),
    Postgres(String),
}

impl Store {
    fn args(&self) -> Vec<String> {
        match self {
            Store::Db(dir) => vec!["--db".into(), dir.display().to_string()],
            Store::Postgres(url) => vec!["--postgres".into(), url.clone()],
        }
    }
}

/// A running `idemdb proxy --listen 127.0.0.1:0`.
pub struct Proxy {
    proc: Running,
    pub addr: SocketAddr,
}

/// The `idemdb proxy` command with `args` (nothing from the environment).
pub fn proxy_command(args: &[String]) -> Command {
    let mut cmd = Command::new(IDEMDB);
    cmd.arg("proxy")
        .args(args)
        .env_remove("IDEMDB_POSTGRES_URL")
        .env("RUST_BACKTRACE", "1");
    cmd
}

impl Proxy {
    /// Starts a proxy in front of `upstream` on `store`, with `extra` arguments (`--routes FILE`,
    /// timeouts), and waits for its `idemdb proxy: listening on 127.0.0.1:PORT` line.
    pub fn start(upstream: &str, store: &Store, extra: &[&str]) -> Proxy {
        let mut args: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--upstream".into(),
            upstream.into(),
        ];
        args.extend(store.args());
        args.extend(extra.iter().map(|s| s.to_string()));
        let name = format!("the proxy (idemdb proxy {})", args.join(" "));
        let mut proc = Running::spawn(&name, proxy_command(&args));
        let line = proc.next_line(READY_WITHIN, "`idemdb proxy: listening on 127.0.0.1:PORT`");
        let addr = line
            .strip_prefix("idemdb proxy: listening on ")
            .and_then(|a| a.trim().parse::<SocketAddr>().ok())
            .unwrap_or_else(|| {
                panic!(
                    "{name}'s first stdout line is {line:?}, not `idemdb proxy: listening on \
                     127.0.0.1:PORT`; its stderr:\n{}",
                    proc.stderr()
                )
            });
        Proxy { proc, addr }
    }

    pub fn kill(&mut self) {
        self.proc.kill();
    }

    pub fn terminate(&self) {
        self.proc.terminate();
    }

    pub fn wait_exit(&mut self, within: Duration, what: &str) -> ExitStatus {
        self.proc.wait_exit(within, what)
    }

    pub fn stderr(&self) -> String {
        self.proc.stderr()
    }
}

/// Writes a routes file into `dir` and returns its path.
pub fn routes_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the routes file");
    path
}

// ------------------------------------------------------------------------------------------------
// The HTTP/1.1 client

/// Header names and values, as sent or received (names of received headers in lower case).
pub type Headers = Vec<(String, Vec<u8>)>;

/// A request, written byte by byte as built: `Req::post("/payments").key("k").json("a", 5)`.
#[derive(Clone, Debug)]
pub struct Req {
    pub method: String,
    pub path: String,
    pub headers: Headers,
    pub body: Vec<u8>,
    /// Send no `Content-Length` of our own (the test wrote one, or a `Transfer-Encoding`).
    raw_length: bool,
}

/// What came back.
#[derive(Clone, Debug)]
pub struct Got {
    pub status: u16,
    pub headers: Headers,
    pub body: Vec<u8>,
    /// When the request's first byte was sent, and when the whole answer was read.
    pub sent: Instant,
    pub received: Instant,
}

impl Req {
    pub fn new(method: &str, path: &str) -> Req {
        Req {
            method: method.into(),
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
            raw_length: false,
        }
    }
    pub fn post(path: &str) -> Req {
        Req::new("POST", path)
    }
    pub fn get(path: &str) -> Req {
        Req::new("GET", path)
    }
    /// `Idempotency-Key: "k"` (a structured-field string).
    pub fn key(self, k: &str) -> Req {
        self.header("Idempotency-Key", &format!("\"{k}\""))
    }
    pub fn header(self, name: &str, value: &str) -> Req {
        self.raw_header(name, value.as_bytes())
    }
    pub fn raw_header(mut self, name: &str, value: &[u8]) -> Req {
        if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            self.raw_length = true;
        }
        self.headers.push((name.into(), value.to_vec()));
        self
    }
    pub fn body(mut self, b: impl Into<Vec<u8>>) -> Req {
        self.body = b.into();
        self
    }
    /// A payment's JSON body with its Content-Type.
    pub fn json(self, account: &str, amount: u64) -> Req {
        self.header("Content-Type", "application/json")
            .body(format!("{{\"account\":\"{account}\",\"amount\":{amount}}}"))
    }

    /// The request's bytes (with `Host`, `Content-Length` and `Connection: close` added).
    pub fn bytes(&self, addr: SocketAddr) -> Vec<u8> {
        let mut out =
            format!("{} {} HTTP/1.1\r\nHost: {addr}\r\n", self.method, self.path).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        if !self.raw_length && (!self.body.is_empty() || self.method != "GET") {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        out.extend_from_slice(&self.body);
        out
    }

    /// Sends the request on a new connection and reads the whole answer.
    pub fn try_send(&self, addr: SocketAddr) -> std::io::Result<Got> {
        let sent = Instant::now();
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(ANSWER_WITHIN))?;
        stream.write_all(&self.bytes(addr))?;
        let (status, headers, body) = read_response(&mut BufReader::new(&mut stream))?;
        Ok(Got {
            status,
            headers,
            body,
            sent,
            received: Instant::now(),
        })
    }

    /// As [`Req::try_send`]; a connection that fails or closes without an answer fails the test.
    pub fn send(&self, addr: SocketAddr) -> Got {
        self.try_send(addr).unwrap_or_else(|e| {
            panic!(
                "no answer from {addr} to {} {} (waited at most {ANSWER_WITHIN:?}): {e}",
                self.method, self.path
            )
        })
    }

    /// Sends the whole request, then closes the connection without reading anything: a reply
    /// lost on its way back.
    pub fn send_and_hang_up(&self, addr: SocketAddr) {
        let mut stream = TcpStream::connect(addr)
            .unwrap_or_else(|e| panic!("connect to the proxy at {addr}: {e}"));
        stream
            .write_all(&self.bytes(addr))
            .unwrap_or_else(|e| panic!("send to the proxy at {addr}: {e}"));
        let _ = stream.shutdown(Shutdown::Both);
    }
}

/// Reads one response (skipping 1xx): status, headers, body (by Content-Length, chunked, or to
/// the end of the connection).
pub fn read_response(r: &mut impl BufRead) -> std::io::Result<(u16, Headers, Vec<u8>)> {
    use std::io::{Error, ErrorKind};
    let bad = |what: String| Error::new(ErrorKind::InvalidData, what);
    loop {
        let mut line = Vec::new();
        if r.read_until(b'\n', &mut line)? == 0 {
            return Err(Error::new(
                ErrorKind::UnexpectedEof,
                "the connection closed before a status line",
            ));
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        let status: u16 = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .filter(|_| text.starts_with("HTTP/1."))
            .ok_or_else(|| bad(format!("not a status line: {text:?}")))?;
        let mut headers = Vec::new();
        loop {
            let mut h = Vec::new();
            if r.read_until(b'\n', &mut h)? == 0 {
                return Err(Error::new(ErrorKind::UnexpectedEof, "EOF in the headers"));
            }
            while matches!(h.last(), Some(b'\n' | b'\r')) {
                h.pop();
            }
            if h.is_empty() {
                break;
            }
            let colon = h
                .iter()
                .position(|&b| b == b':')
                .ok_or_else(|| bad(format!("not a header: {:?}", String::from_utf8_lossy(&h))))?;
            let name = String::from_utf8_lossy(&h[..colon]).to_ascii_lowercase();
            let value = h[colon + 1..].trim_ascii().to_vec();
            headers.push((name, value));
        }
        if (100..200).contains(&status) {
            continue;
        }
        let get = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        let mut body = Vec::new();
        if get("transfer-encoding").is_some_and(|t| t.to_ascii_lowercase().contains("chunked")) {
            loop {
                let mut size = String::new();
                r.read_line(&mut size)?;
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| bad(format!("bad chunk size {size:?}")))?;
                if n == 0 {
                    loop {
                        let mut t = String::new();
                        if r.read_line(&mut t)? == 0 || t.trim().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let start = body.len();
                body.resize(start + n, 0);
                r.read_exact(&mut body[start..])?;
                let mut crlf = String::new();
                r.read_line(&mut crlf)?;
            }
        } else if let Some(len) = get("content-length") {
            let len: usize = len
                .trim()
                .parse()
                .map_err(|_| bad(format!("bad Content-Length {len:?}")))?;
            body.resize(len, 0);
            r.read_exact(&mut body)?;
        } else if status != 204 && status != 304 {
            r.read_to_end(&mut body)?;
        }
        return Ok((status, headers, body));
    }
}

impl Got {
    /// The first value of header `name` (any case), as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
    /// The `code` of a problem document, or None if the answer is not one.
    pub fn problem(&self) -> Option<String> {
        let ct = self.header("content-type")?;
        if !ct.starts_with("application/problem+json") {
            return None;
        }
        let doc: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        doc.get("code")?.as_str().map(str::to_owned)
    }
    /// The `code` of a problem document; panics (showing the answer) if it is not one.
    pub fn code(&self) -> String {
        self.problem()
            .unwrap_or_else(|| panic!("not an application/problem+json with a code: {self}"))
    }
    /// The JSON body.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not a JSON body ({e}): {self}"))
    }
}

impl std::fmt::Display for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.status)?;
        for (k, v) in &self.headers {
            write!(f, " | {k}: {}", String::from_utf8_lossy(v))?;
        }
        let text = self.text();
        let cut = text.char_indices().nth(400).map_or(text.len(), |(i, _)| i);
        write!(f, " | body ({} bytes): {}", self.body.len(), &text[..cut])
    }
}

// ------------------------------------------------------------------------------------------------
// PostgreSQL

#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../conformance/harness.rs"]
mod pg;

pub use pg::pg_url;

/// Runs a future to its end on a runtime of its own (the tests themselves are plain threads).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}

/// A new schema of the suite's PostgreSQL for one test, dropped when the guard is.
pub struct Schema {
    pub name: String,
}

impl Schema {
    /// A fresh schema named after `test` (use `module_path!()`); fails naming the server if it
    /// cannot be reached.
    pub fn fresh(test: &str) -> Schema {
        Schema {
            name: block_on(pg::fresh_schema(test)),
        }
    }

    /// The URL a proxy opens the store with.
    pub fn url(&self) -> String {
        pg::in_schema(&self.name)
    }

    /// The same URL through `127.0.0.1:port` (a [`Relay`]) instead of the server's address.
    pub fn url_via(&self, port: u16) -> String {
        let url = self.url();
        let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
        let slash = rest.find('/').unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(slash);
        let userinfo = authority.rsplit_once('@').map(|(u, _)| u);
        match userinfo {
            Some(u) => format!("{scheme}://{u}@127.0.0.1:{port}{tail}"),
            None => format!("{scheme}://127.0.0.1:{port}{tail}"),
        }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            block_on(pg::drop_schema(&self.name));
        }
    }
}

/// The suite's PostgreSQL server's address (from [`pg_url`]).
pub fn pg_addr() -> SocketAddr {
    relay::server_addr(&pg_url())
}

#[path = "../common/relay.rs"]
mod relay;
pub use relay::Relay;

/// A port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}
