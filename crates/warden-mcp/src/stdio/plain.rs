//! The one-pass reading of a plain `tools/call`, which both paths take: the direct path
//! answers the call it reads, and rmcp gets the message its own reading would make.

use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, JsonObject, JsonRpcRequest,
    JsonRpcVersion2_0, MetaObject, Request, RequestId, RequestMetaObject,
};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// A `tools/call` of the usual shape, read in one pass. rmcp reads any message by trying
/// each kind and each request in turn over a buffered copy, about a sixth of a call's cost
/// on this path; a line with anything more (another field, `inputResponses`) takes that way.
/// The arguments stay the client's text: the dispatcher parses them once, where reading them
/// into a map here and writing them out again for it cost a parse and a print a call. What
/// can be is borrowed from the line (a `jsonrpc` or `method` written with escapes is not
/// plain, and takes rmcp's way).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlainCall<'a> {
    jsonrpc: &'a str,
    pub(super) id: RequestId,
    method: &'a str,
    #[serde(borrow)]
    pub(super) params: PlainCallParams<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlainCallParams<'a> {
    #[serde(borrow)]
    pub(super) name: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "object_text")]
    pub(super) arguments: Option<&'a RawValue>,
    #[serde(rename = "_meta", default)]
    pub(super) meta: Option<JsonObject>,
}

/// The text of `arguments` when it is an object, none when it is null; anything else is not a
/// plain call (rmcp's reading answers it as invalid params).
fn object_text<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<&'a RawValue>, D::Error> {
    let raw = Option::<&'a RawValue>::deserialize(d)?;
    match raw {
        Some(raw) if !raw.get().starts_with('{') => {
            Err(serde::de::Error::custom("arguments are not an object"))
        }
        raw => Ok(raw),
    }
}

impl<'a> PlainCall<'a> {
    /// `line` as a plain call, when it is one.
    pub(super) fn read(line: &'a [u8]) -> Option<Self> {
        let call: Self = serde_json::from_slice(line).ok()?;
        (call.jsonrpc == "2.0" && call.method == "tools/call").then_some(call)
    }

    /// The message rmcp's own reading makes of the same line: `_meta` in the extensions.
    pub(super) fn into_message(self) -> serde_json::Result<ClientJsonRpcMessage> {
        let mut params = CallToolRequestParams::new(self.params.name.into_owned());
        params.arguments = self
            .params
            .arguments
            .map(|raw| serde_json::from_str::<JsonObject>(raw.get()))
            .transpose()?;
        let mut request = Request::new(params);
        if let Some(meta) = self.params.meta {
            request
                .extensions
                .insert(RequestMetaObject(MetaObject(meta)));
        }
        Ok(ClientJsonRpcMessage::Request(JsonRpcRequest {
            jsonrpc: JsonRpcVersion2_0,
            id: self.id,
            request: ClientRequest::CallToolRequest(request),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stdio::read;
    use rmcp::model::GetExtensions;
    use serde_json::Value;

    fn answer(line: &str) -> Option<Value> {
        read(line.as_bytes()).expect_err("not a message")
    }

    /// The one-pass reading of a plain `tools/call` makes what rmcp's reading makes, `_meta`
    /// included; a line with more in it is left to rmcp.
    #[test]
    fn a_plain_call_reads_as_rmcp_reads_it() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"noop"}}"#,
            r#"{"params":{"_meta":{"progressToken":7},"name":"add","arguments":null},"method":"tools/call","id":4,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"a\u0064d","arguments":{"a":"\u00e9"}}}"#,
        ];
        for line in lines {
            let plain = PlainCall::read(line.as_bytes())
                .unwrap()
                .into_message()
                .unwrap();
            let rmcp = serde_json::from_str::<ClientJsonRpcMessage>(line).unwrap();
            assert_eq!(
                serde_json::to_value(&plain).unwrap(),
                serde_json::to_value(&rmcp).unwrap(),
                "{line}"
            );
            let (ClientJsonRpcMessage::Request(a), ClientJsonRpcMessage::Request(b)) =
                (plain, rmcp)
            else {
                panic!("not requests: {line}");
            };
            assert_eq!(
                a.request.extensions().get::<RequestMetaObject>(),
                b.request.extensions().get::<RequestMetaObject>(),
                "{line}"
            );
        }
        for more in [
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","requestState":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"add"},"extra":1}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/lis\u0074","params":{"name":"add"}}"#,
            r#"{"jsonrpc":"2.0","id":10,"method":"prompts/get","params":{"name":"add"}}"#,
        ] {
            assert!(PlainCall::read(more.as_bytes()).is_none(), "{more}");
            assert!(read(more.as_bytes()).is_ok(), "rmcp reads it: {more}");
        }
        // Another version of JSON-RPC: not plain, and refused as rmcp's reading refuses it.
        let version = r#"{"jsonrpc":"1.0","id":9,"method":"tools/call","params":{"name":"add"}}"#;
        assert!(PlainCall::read(version.as_bytes()).is_none());
        assert_eq!(answer(version).unwrap()["error"]["code"], -32600);
        // Arguments that are not an object: not plain, and rmcp's reading refuses them.
        let scalar = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"add","arguments":5}}"#;
        assert!(PlainCall::read(scalar.as_bytes()).is_none());
        assert_eq!(answer(scalar).unwrap()["error"]["code"], -32602);
    }
}
