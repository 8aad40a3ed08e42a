//! A minimal Responses API client for `shellgate local`: `POST /responses`
//! with `"stream": true`, the model's text printed as it arrives, the
//! final response returned.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;
use shellgate_model::upstream::read_events;

/// Longest wait between two pieces of a stream (a model may think long).
const READ_TIMEOUT: Duration = Duration::from_secs(600);

pub struct Client {
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
}

impl Client {
    pub fn new(base_url: &str, api_key: Option<String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .context("cannot make an HTTP client")?;
        Ok(Self {
            http,
            url: format!("{}/responses", base_url.trim_end_matches('/')),
            api_key,
        })
    }

    /// Creates a response, streaming: the model's text goes to `text` as it
    /// comes; returns the final response object.
    pub async fn create(&self, body: &Value, text: &mut dyn Write) -> Result<Value> {
        let mut body = body.clone();
        body["stream"] = Value::Bool(true);
        let mut request = self.http.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.url))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let message = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or(body);
            anyhow::bail!("{} answered {status}: {message}", self.url);
        }
        let mut finished: Option<Result<Value>> = None;
        read_events(response, READ_TIMEOUT, |event| {
            match event["type"].as_str().unwrap_or_default() {
                "response.output_text.delta" => {
                    let _ = text.write_all(event["delta"].as_str().unwrap_or("").as_bytes());
                    let _ = text.flush();
                    return Ok(true);
                }
                "response.completed" | "response.incomplete" => {
                    finished = Some(Ok(event["response"].clone()));
                }
                "response.failed" => {
                    let error = &event["response"]["error"];
                    finished = Some(Err(anyhow::anyhow!(
                        "the response failed: {}",
                        error["message"].as_str().unwrap_or("no reason given")
                    )));
                }
                "error" => {
                    finished = Some(Err(anyhow::anyhow!(
                        "the response failed: {}",
                        event["message"]
                            .as_str()
                            .or(event["error"]["message"].as_str())
                            .unwrap_or("no reason given")
                    )));
                }
                _ => return Ok(true),
            }
            Ok(false)
        })
        .await
        .map_err(|e| anyhow::anyhow!("the response stream broke off: {e}"))?;
        finished.unwrap_or_else(|| {
            Err(anyhow::anyhow!(
                "the response stream ended before the response completed"
            ))
        })
    }
}
