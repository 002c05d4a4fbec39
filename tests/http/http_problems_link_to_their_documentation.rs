//! As the IETF draft asks of 400 and 422, problem responses link to documentation: their `type` is
//! the documentation base followed by the code, sent again in `Link: <...>; rel="help"`. The
//! default base is the crate's `http` module docs on docs.rs (anchor per code); a layer can be
//! given its own, and an empty base gives `about:blank` without a `Link`.
use crate::common;

use common::{client, req, serve, Got};
use idemdb::Durability;

fn problem_type(got: &Got) -> String {
    let text = got.text();
    let start = text.find("\"type\":\"").expect("type member") + 8;
    let end = text[start..].find('"').expect("end of type") + start;
    text[start..end].to_owned()
}

async fn missing_and_reused(base: Option<&str>) -> (Got, Got) {
    let srv = serve(Durability::Buffered, 1 << 20, |l| {
        let l = l.require_key(true);
        match base {
            Some(b) => l.problem_type_base(b),
            None => l,
        }
    })
    .await;
    let c = client();
    let missing = req(srv.addr, "POST", "/pay").user("alice").send(&c).await;
    let first = req(srv.addr, "POST", "/pay")
        .key("k")
        .user("alice")
        .body("a")
        .send(&c)
        .await;
    assert_eq!(first.status, 201);
    let reused = req(srv.addr, "POST", "/pay")
        .key("k")
        .user("alice")
        .body("b")
        .send(&c)
        .await;
    assert_eq!((missing.status, reused.status), (400, 422));
    (missing, reused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn problems_link_to_their_documentation() {
    let (missing, reused) = missing_and_reused(None).await;
    let docs = format!(
        "https://docs.rs/idemdb/{}/idemdb/http/index.html#",
        env!("CARGO_PKG_VERSION")
    );
    for (got, code) in [
        (&missing, "idempotency-key-missing"),
        (&reused, "idempotency-key-reused"),
    ] {
        assert_eq!(got.problem_code(), code);
        let uri = format!("{docs}{code}");
        assert_eq!(problem_type(got), uri);
        assert_eq!(
            got.header("link"),
            Some(format!("<{uri}>; rel=\"help\"").as_str())
        );
    }

    let (missing, reused) = missing_and_reused(Some("https://api.example.com/errors#")).await;
    assert_eq!(
        problem_type(&missing),
        "https://api.example.com/errors#idempotency-key-missing"
    );
    assert_eq!(
        reused.header("link"),
        Some("<https://api.example.com/errors#idempotency-key-reused>; rel=\"help\"")
    );

    let (missing, reused) = missing_and_reused(Some("")).await;
    for got in [&missing, &reused] {
        assert_eq!(problem_type(got), "about:blank");
        assert_eq!(got.header("link"), None);
    }
}
