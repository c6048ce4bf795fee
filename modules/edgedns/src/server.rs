//! The DNS request handler: a question about the cluster zone is answered from the [`Zone`]
//! (authoritative, so offline too); any other goes to the [`Forwarder`]. hickory-server reads
//! and writes the wire format; nothing here touches bytes.

use std::sync::Arc;

use hickory_proto::op::{Edns, Header, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_server::authority::MessageResponseBuilder;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};

use crate::follow::SharedZone;
use crate::forward::{Forwarded, Forwarder};
use crate::zone::Answer;

/// Answers queries from the zone and the forwarder.
pub(crate) struct Handler {
    pub(crate) zone: SharedZone,
    pub(crate) forwarder: Arc<Forwarder>,
}

/// A response before it is encoded.
struct Reply {
    code: ResponseCode,
    authoritative: bool,
    answers: Vec<Record>,
    authority: Vec<Record>,
    additionals: Vec<Record>,
}

// === impl Handler ===

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let reply = self.reply(request).await;
        let mut header = Header::response_from_request(request.header());
        header.set_response_code(reply.code);
        header.set_authoritative(reply.authoritative);
        header.set_recursion_available(true);
        let mut builder = MessageResponseBuilder::from_message_request(request);
        if let Some(edns) = request.edns() {
            let mut ours = Edns::new();
            ours.set_max_payload(edns.max_payload().max(512));
            builder.edns(ours);
        }
        let message = builder.build(
            header,
            reply.answers.iter(),
            std::iter::empty(),
            reply.authority.iter(),
            reply.additionals.iter(),
        );
        match response.send_response(message).await {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(error = %e, "sending a DNS response failed");
                let mut header = Header::new();
                header.set_response_code(ResponseCode::ServFail);
                header.into()
            }
        }
    }
}

impl Handler {
    /// The reply to `request` (one question, as every resolver sends).
    async fn reply(&self, request: &Request) -> Reply {
        if request.message_type() != MessageType::Query {
            return Reply::code(ResponseCode::FormErr);
        }
        if request.op_code() != OpCode::Query {
            return Reply::code(ResponseCode::NotImp);
        }
        let Ok(info) = request.request_info() else {
            return Reply::code(ResponseCode::FormErr);
        };
        let name = Name::from(info.query.name());
        let qtype = info.query.query_type();
        let (answer, soa) = {
            let zone = self.zone.read().unwrap_or_else(|e| e.into_inner());
            let answer = zone.lookup(&name, qtype);
            // Only a negative answer carries the SOA: no work for the others.
            let negative = matches!(answer, Answer::NoData | Answer::NxDomain);
            (answer, negative.then(|| zone.soa()))
        };
        match answer {
            Answer::Records {
                answers,
                additionals,
            } => self.local(answers, additionals, qtype).await,
            Answer::NoData => Reply::negative(ResponseCode::NoError, soa),
            Answer::NxDomain => Reply::negative(ResponseCode::NXDomain, soa),
            Answer::NotOurs => self.forwarded(name, qtype).await,
        }
    }

    /// An answer from the zone; a CNAME (an ExternalName Service) is followed upstream, as
    /// CoreDNS does, so a stub resolver gets the addresses in one answer.
    async fn local(
        &self,
        mut answers: Vec<Record>,
        additionals: Vec<Record>,
        q: RecordType,
    ) -> Reply {
        let only_cname = answers.len() == 1 && answers[0].record_type() == RecordType::CNAME;
        let target = match answers.first().map(Record::data) {
            Some(RData::CNAME(target)) if only_cname && q != RecordType::CNAME => {
                Some(target.0.clone())
            }
            _ => None,
        };
        if let Some(target) = target
            && let Forwarded::Records(more) = self.forwarder.resolve(target, q).await
        {
            answers.extend(more);
        }
        Reply {
            code: ResponseCode::NoError,
            authoritative: true,
            answers,
            authority: Vec::new(),
            additionals,
        }
    }

    async fn forwarded(&self, name: Name, qtype: RecordType) -> Reply {
        match self.forwarder.resolve(name, qtype).await {
            Forwarded::Records(answers) => Reply {
                answers,
                ..Reply::code(ResponseCode::NoError)
            },
            Forwarded::Empty { code, soa } => Reply {
                authority: soa.into_iter().map(|soa| *soa).collect(),
                ..Reply::code(code)
            },
            Forwarded::Failed => Reply::code(ResponseCode::ServFail),
        }
    }
}

// === impl Reply ===

impl Reply {
    fn code(code: ResponseCode) -> Reply {
        Reply {
            code,
            authoritative: false,
            answers: Vec::new(),
            authority: Vec::new(),
            additionals: Vec::new(),
        }
    }

    /// NXDOMAIN or NODATA from the zone, with its SOA.
    fn negative(code: ResponseCode, soa: Option<Record>) -> Reply {
        Reply {
            authoritative: true,
            authority: soa.into_iter().collect(),
            ..Reply::code(code)
        }
    }
}
