//! Example tool: `fetch(url)` over `warden_guest::http`. It holds no credentials and no
//! allowlist of its own: the policy grants the hosts, and warden adds any API key.

use warden_guest::ErrorText;

warden_guest::wit_bindgen::generate!({
    runtime_path: "warden_guest::wit_bindgen::rt",
});

/// Characters of body kept when the caller does not say.
const DEFAULT_MAX_CHARS: u32 = 20_000;

struct Fetch;

impl Guest for Fetch {
    fn fetch(url: String, max_chars: Option<u32>) -> Result<Page, String> {
        let response = warden_guest::http::get(&url).err_text()?;
        let text = response.text();
        let max = max_chars.unwrap_or(DEFAULT_MAX_CHARS) as usize;
        let truncated = text.chars().count() > max;
        let body = if truncated {
            text.chars().take(max).collect()
        } else {
            text
        };
        Ok(Page {
            status: response.status,
            content_type: response.header("content-type").map(str::to_owned),
            body,
            truncated,
        })
    }
}

export!(Fetch);
