//! The browser around the page: the address and its history, downloads, fetching bundles (and the prefetched one).

use leptos::prelude::*;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::state::{self, PageState};

/// The page state in the address (`?bundle=...&view=...`).
pub(super) fn query_state() -> PageState {
    let search = window().location().search().unwrap_or_default();
    let Ok(params) = web_sys::UrlSearchParams::new_with_str(&search) else { return PageState::default() };
    let mut pairs: Vec<(String, String)> = Vec::new();
    for key in state::KEYS {
        if let Some(v) = params.get(key) {
            pairs.push((key.to_string(), v));
        }
    }
    PageState::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// Puts `query` in the address, so a reload or a shared link shows the same state: as a new history entry when
/// `push` (another view or bundle: Back returns to the one before), else in place of the current one (a filter
/// edit, an option). Nothing when the address already holds it (the state was just read from it: Back, Forward).
pub(super) fn set_query(query: &str, push: bool) {
    let Ok(history) = window().history() else { return };
    let location = window().location();
    if location.search().unwrap_or_default() == query {
        return;
    }
    let path = location.pathname().unwrap_or_default();
    let url = format!("{path}{query}");
    // Failing to update the address bar is harmless: ignore it.
    let _ = match push {
        true => history.push_state_with_url(&JsValue::NULL, "", Some(&url)),
        false => history.replace_state_with_url(&JsValue::NULL, "", Some(&url)),
    };
}

/// Calls `f` whenever Back or Forward changes the address (`popstate`), for the page to read its state from it
/// again ([`query_state`]). For the page's whole life.
pub(super) fn on_history(f: impl Fn() + 'static) {
    let handle = window_event_listener(leptos::ev::popstate, move |_| f());
    // Never removed: the page listens as long as it lives.
    std::mem::forget(handle);
}

/// The bar's popovers (About, Open files: `details` drawn over the page) close as a menu does, on a click outside
/// them (opening one closes the other) or on Escape; a click inside one (a file picker) leaves it open. For the
/// page's whole life.
pub(super) fn close_popovers_as_menus() {
    let click = window_event_listener(leptos::ev::click, |ev| {
        let target = ev.target().and_then(|t| t.dyn_into::<web_sys::Node>().ok());
        close_popovers(target.as_ref());
    });
    let escape = window_event_listener(leptos::ev::keydown, |ev| {
        if ev.key() == "Escape" {
            close_popovers(None);
        }
    });
    // Never removed: the page listens as long as it lives.
    std::mem::forget((click, escape));
}

/// Closes every open popover of the bar that does not hold `within` (`None`: every one).
pub(super) fn close_popovers(within: Option<&web_sys::Node>) {
    let Ok(open) = document().query_selector_all(POPOVERS) else { return };
    for i in 0..open.length() {
        let Some(d) = open.item(i).and_then(|n| n.dyn_into::<web_sys::Element>().ok()) else { continue };
        if within.is_some_and(|t| d.contains(Some(t))) {
            continue;
        }
        let _ = d.remove_attribute("open");
    }
}

/// The open popovers: the bar's `details` whose content is drawn over the page (the provenance opens in the flow
/// and stays open until its own summary is clicked).
const POPOVERS: &str = "details.about[open], details.open-files[open]";

/// Starts a download of `url` as `name`.
pub(super) fn download_url(url: &str, name: &str) {
    let doc = document();
    let Ok(a) = doc.create_element("a") else { return };
    let Ok(a) = a.dyn_into::<web_sys::HtmlAnchorElement>() else { return };
    a.set_href(url);
    a.set_download(name);
    if let Some(body) = doc.body() {
        let _ = body.append_child(&a);
        a.click();
        let _ = body.remove_child(&a);
    }
}

/// Starts a download of `text` as `name`.
pub(super) fn download_text(text: &str, name: &str, mime: &str) {
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type(mime);
    let Ok(blob) = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts) else { return };
    let Ok(url) = web_sys::Url::create_object_url_with_blob(&blob) else { return };
    download_url(&url, name);
    let _ = web_sys::Url::revoke_object_url(&url);
}

/// The bytes of `file` if index.html started fetching it (`?bundle=`) while the wasm loaded; taken once, by
/// the load of that file.
/// `None` (fetch again, for the error message) when it did not, or the request failed.
pub(super) async fn prefetched(file: &str) -> Option<Vec<u8>> {
    let win: JsValue = window().into();
    let key = JsValue::from_str("__dllmPrefetch");
    let pre = js_sys::Reflect::get(&win, &key).ok().filter(|v| v.is_object())?;
    // Only the load of that very file takes it (the compared bundle's load must not wait for it, nor steal it).
    if js_sys::Reflect::get(&pre, &JsValue::from_str("file")).ok()?.as_string()? != file {
        return None;
    }
    let _ = js_sys::Reflect::delete_property(win.unchecked_ref::<js_sys::Object>(), &key);
    let promise: js_sys::Promise = js_sys::Reflect::get(&pre, &JsValue::from_str("bytes")).ok()?.dyn_into().ok()?;
    let buf = JsFuture::from(promise).await.ok().filter(JsValue::is_object)?;
    super::mark("dllm:bundle-arrived");
    Some(js_sys::Uint8Array::new(&buf).to_vec())
}

pub(super) fn utf8(url: &str, bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes)
        .map_err(|e| format!("{url} is not a text file: invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()))
}

/// GETs `url` as bytes and checks they are UTF-8 (cheaper for large bundles than a JS string: no UTF-16
/// round trip); errors are user messages.
pub(super) async fn fetch_utf8(url: &str) -> Result<String, String> {
    let resp = fetch_response(url).await?;
    let fail = |why: String| format!("could not fetch {url}: {why}");
    let buf = resp.array_buffer().map_err(|e| fail(js_message(&e)))?;
    let buf = JsFuture::from(buf).await.map_err(|e| fail(js_message(&e)))?;
    utf8(url, js_sys::Uint8Array::new(&buf).to_vec())
}

/// GETs `url` (relative to the page), bypassing stale caches; errors are user messages.
pub(super) async fn fetch_response(url: &str) -> Result<web_sys::Response, String> {
    let fail = |why: String| format!("could not fetch {url}: {why}");
    let init = web_sys::RequestInit::new();
    init.set_cache(web_sys::RequestCache::NoCache);
    let req = web_sys::Request::new_with_str_and_init(url, &init).map_err(|e| fail(js_message(&e)))?;
    let resp = JsFuture::from(window().fetch_with_request(&req)).await.map_err(|e| fail(js_message(&e)))?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|_| fail("not an HTTP response".into()))?;
    if resp.status() == 404 && url.starts_with("bundles/") && url != super::INDEX_URL {
        return Err(fail(
            "HTTP 404: not in the results folder; choose a bundle above, or check the file name in the link".into(),
        ));
    }
    if !resp.ok() {
        return Err(fail(format!("HTTP {} {}", resp.status(), resp.status_text())));
    }
    Ok(resp)
}

/// GETs `url` (relative to the page) as text, bypassing stale caches; errors are user messages.
pub(super) async fn fetch_text(url: &str) -> Result<String, String> {
    let fail = |why: String| format!("could not fetch {url}: {why}");
    let resp = fetch_response(url).await?;
    let text =
        JsFuture::from(resp.text().map_err(|e| fail(js_message(&e)))?).await.map_err(|e| fail(js_message(&e)))?;
    text.as_string().ok_or_else(|| fail("the response is not text".into()))
}

pub(super) fn js_message(e: &JsValue) -> String {
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        return String::from(err.message());
    }
    e.as_string().unwrap_or_else(|| format!("{e:?}"))
}
