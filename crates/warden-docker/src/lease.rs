//! Who owns a container, and when its owner is gone — on this machine or any other.
//!
//! Every container carries its warden instance ([`INSTANCE_LABEL`], drawn per [`Engine`]) and
//! its owner process ([`OWNER_LABEL`], `boot-id:pid:start-time`). An instance holds a lease
//! on each engine it uses: a marker container, created before the instance's first container
//! and never started, labelled [`LEASE_LABEL`] and named `warden-lease-<instance>-<expiry>`,
//! the expiry in Unix seconds of the ENGINE's clock (so wardens with skewed clocks agree).
//! Labels cannot change after creation, names can: the instance renews its lease by renaming
//! its marker, one request per period for all its containers, from a task of its own while
//! the engine is in use.
//!
//! Any warden reaching the engine removes, on first contact and every lease length after:
//! - the containers of an instance whose lease expired or whose marker is gone, then the
//!   expired markers (containers are listed before markers: a marker is made before its
//!   instance's first container, so a container listed first finds its marker in the later
//!   list unless that marker is really gone);
//! - at once, the containers and markers whose owner process ran on this machine (same boot
//!   id) and is gone: a kill -9 on this machine costs no wait. A warden elsewhere cannot tell
//!   a pid of ours, so for it the lease is the rule.
//!
//! A warden stalled past its lease (a suspended laptop) loses its containers; its next
//! renewal finds its marker gone and makes a new one, and its sessions start afresh.
//!
//! [`Engine`]: crate::Engine

use crate::removal::{finish_apart, remove};
use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RenameContainerOptionsBuilder,
};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use warden_core::owner::{self, Liveness};

/// Every container warden creates carries this label (`docker ps -a --filter label=warden`).
pub const LABEL: &str = "warden";
/// The process that owns a container: `boot-id:pid:start-time`.
pub const OWNER_LABEL: &str = "warden.owner";
/// The warden instance (one [`crate::Engine`]) that owns a container.
pub const INSTANCE_LABEL: &str = "warden.instance";
/// A lease marker's instance.
pub const LEASE_LABEL: &str = "warden.lease";

/// How long a lease lasts unrenewed: a warden on another machine that dies leaves its
/// containers for this long. Renewed every third of it, so two renewals may be late or fail
/// (an engine busy for seconds) before the lease ends.
pub const LEASE: Duration = Duration::from_secs(30);
/// Renewals per lease length.
const RENEWALS: u32 = 3;
/// How long removing the marker may hold up an engine's drop.
const RELEASE_WAIT: Duration = Duration::from_secs(2);

const MARKER_PREFIX: &str = "warden-lease-";

/// One instance's lease on one engine.
pub(crate) struct Lease {
    pub instance: String,
    pub owner: String,
    pub length: Duration,
    /// The marker, once made.
    marker: tokio::sync::Mutex<Option<Marker>>,
    /// The engine's clock minus this machine's, in seconds, as last read.
    offset: Mutex<i64>,
}

/// This instance's marker container.
struct Marker {
    id: String,
    name: String,
    /// The image it was made from, to make it again.
    image: String,
}

impl Lease {
    pub(crate) fn new(length: Duration) -> Self {
        Self {
            instance: warden_command::session::nonce()[..16].to_owned(),
            owner: owner::this_process(),
            length,
            marker: tokio::sync::Mutex::new(None),
            offset: Mutex::new(0),
        }
    }

    /// The same instance with a lease of `length` (nothing is held yet).
    pub(crate) fn with_length(&self, length: Duration) -> Self {
        Self {
            instance: self.instance.clone(),
            length,
            ..Self::new(length)
        }
    }

    /// Makes this instance's marker if it has none, from `image` (one the engine has): before
    /// its first container.
    pub(crate) async fn hold(&self, docker: &Docker, image: &str) -> Result<(), BollardError> {
        let mut marker = self.marker.lock().await;
        if marker.is_none() {
            *marker = Some(self.make(docker, image).await?);
        }
        Ok(())
    }

    async fn make(&self, docker: &Docker, image: &str) -> Result<Marker, BollardError> {
        let name = self.name();
        let labels = HashMap::from([
            (LEASE_LABEL.to_owned(), self.instance.clone()),
            (OWNER_LABEL.to_owned(), self.owner.clone()),
        ]);
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(vec!["true".into()]),
            labels: Some(labels),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let id = docker.create_container(Some(options), body).await?.id;
        Ok(Marker {
            id,
            name,
            image: image.to_owned(),
        })
    }

    /// The marker's name for a lease starting now.
    fn name(&self) -> String {
        let expiry = self.engine_now() + self.length.as_secs().max(1) as i64;
        format!("{MARKER_PREFIX}{}-{expiry}", self.instance)
    }

    fn engine_now(&self) -> i64 {
        local_now()
            + *self
                .offset
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the engine's clock.
    async fn read_clock(&self, docker: &Docker) -> Result<(), BollardError> {
        let info = docker.info().await?;
        match info.system_time.as_deref().and_then(unix_seconds) {
            Some(engine) => {
                *self
                    .offset
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = engine - local_now()
            }
            None => tracing::warn!(
                time = ?info.system_time,
                "the Docker engine's clock cannot be read: leases are timed by this machine's"
            ),
        }
        Ok(())
    }

    /// Pushes the lease's end to a lease length from now; makes the marker again if another
    /// warden removed it (this one was stalled past its lease).
    async fn renew(&self, docker: &Docker) -> Result<(), BollardError> {
        let mut slot = self.marker.lock().await;
        let Some(marker) = slot.as_mut() else {
            return Ok(());
        };
        let name = self.name();
        if name == marker.name {
            return Ok(());
        }
        let options = RenameContainerOptionsBuilder::new().name(&name).build();
        match docker.rename_container(&marker.id, options).await {
            Ok(()) => {
                marker.name = name;
                Ok(())
            }
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => {
                tracing::warn!(
                    "this warden's lease on the Docker engine had ended and its containers were \
                     removed by another warden: taking a new one"
                );
                let image = marker.image.clone();
                *slot = Some(self.make(docker, &image).await?);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Removes the containers and markers of instances that are gone (see the module docs).
    pub(crate) async fn reap(&self, docker: &Docker) -> Result<usize, BollardError> {
        self.read_clock(docker).await?;
        let containers = list(docker, LABEL).await?;
        let markers = list(docker, LEASE_LABEL).await?;
        let now = self.engine_now();
        let mut live = HashSet::from([self.instance.clone()]);
        let mut ended = Vec::new();
        for m in markers {
            let (Some(id), Some(instance)) = (m.id, label(&m.labels, LEASE_LABEL)) else {
                continue;
            };
            if instance == self.instance {
                continue;
            }
            let expiry = m
                .names
                .iter()
                .flatten()
                .find_map(|n| n.trim_start_matches('/').rsplit_once('-'))
                .and_then(|(_, e)| e.parse::<i64>().ok());
            let gone = label(&m.labels, OWNER_LABEL).is_some_and(|o| owner_gone_here(&o));
            if gone || expiry.is_none_or(|e| e <= now) {
                ended.push(id);
            } else {
                live.insert(instance);
            }
        }
        let mut removed = 0;
        for c in containers {
            let Some(id) = c.id else { continue };
            let instance = label(&c.labels, INSTANCE_LABEL);
            let owner = label(&c.labels, OWNER_LABEL);
            let lease_ended = instance.is_some_and(|i| !live.contains(&i));
            let gone = owner.is_some_and(|o| owner_gone_here(&o));
            if (lease_ended || gone) && remove(docker, &id).await {
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(
                removed,
                "removed containers left by warden processes that are gone"
            );
        }
        for id in ended {
            remove(docker, &id).await;
        }
        Ok(removed)
    }

    /// Renews the lease every third of its length and reaps every length, until aborted.
    pub(crate) fn keep(self: Arc<Self>, docker: Docker) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let period = self.length / RENEWALS;
            let mut tick = tokio::time::interval(period.max(Duration::from_millis(100)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            for n in 1u32.. {
                tick.tick().await;
                if let Err(e) = self.renew(&docker).await {
                    tracing::warn!("cannot renew this warden's lease on the Docker engine: {e}");
                }
                if n % RENEWALS == 0
                    && let Err(e) = self.reap(&docker).await
                {
                    tracing::warn!("cannot remove containers of wardens that are gone: {e}");
                }
            }
        })
    }

    /// Removes the marker (the engine's last user is going); best effort, briefly.
    pub(crate) fn release(&self, docker: Docker) {
        let Some(marker) = self.marker.try_lock().ok().and_then(|mut m| m.take()) else {
            return;
        };
        finish_apart("warden-lease-release", async move {
            let _ = tokio::time::timeout(RELEASE_WAIT, remove(&docker, &marker.id)).await;
        });
    }
}

async fn list(
    docker: &Docker,
    label: &str,
) -> Result<Vec<bollard::models::ContainerSummary>, BollardError> {
    let filters: HashMap<&str, Vec<&str>> = HashMap::from([("label", vec![label])]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    docker.list_containers(Some(options)).await
}

fn label(labels: &Option<HashMap<String, String>>, key: &str) -> Option<String> {
    labels.as_ref().and_then(|l| l.get(key)).cloned()
}

fn local_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Unix seconds of an RFC 3339 time as the engine writes it (`2026-12-01T07:50:35.51Z`,
/// `…+01:00`).
fn unix_seconds(text: &str) -> Option<i64> {
    let num = |s: &str| s.parse::<i64>().ok();
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-');
    let (y, m, day) = (num(d.next()?)?, num(d.next()?)?, num(d.next()?)?);
    let (clock, offset) = match time.find(['Z', 'z', '+', '-']) {
        Some(i) => time.split_at(i),
        None => return None,
    };
    let mut c = clock.splitn(3, ':');
    let (h, min) = (num(c.next()?)?, num(c.next()?)?);
    let s = num(c.next()?.split('.').next()?)?;
    let offset = match offset.as_bytes().first()? {
        b'Z' | b'z' => 0,
        sign => {
            let (oh, om) = offset[1..].split_once(':')?;
            let o = num(oh)? * 3600 + num(om)? * 60;
            if *sign == b'-' { -o } else { o }
        }
    };
    // Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + min * 60 + s - offset)
}

/// True when the owner ran on this machine since its last boot and is gone. An owner of
/// another machine (or another boot) is never gone by this rule: its lease decides.
fn owner_gone_here(owner: &str) -> bool {
    owner::liveness(owner) == Liveness::Gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_clock_is_read_with_its_offset() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            unix_seconds("2026-12-01T07:50:35.514108137Z"),
            Some(1_796_111_435)
        );
        assert_eq!(
            unix_seconds("2026-12-01T08:50:35.5+01:00"),
            Some(1_796_111_435)
        );
        assert_eq!(
            unix_seconds("2024-02-29T00:00:00-00:30"),
            Some(1_709_166_600)
        );
        assert_eq!(unix_seconds("yesterday"), None);
    }
}
