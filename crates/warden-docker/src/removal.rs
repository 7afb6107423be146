//! Removing a container: what its owner does when it ends, and what the reaper does for a
//! warden that is gone.

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::query_parameters::RemoveContainerOptionsBuilder;

/// Kills and removes a container with its volumes (they held its copied roots); true when it
/// was there.
pub(crate) async fn remove(docker: &Docker, id: &str) -> bool {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => true,
        Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => false,
        // Another removal (the pool's end, the lease's reaper) got there first: it is going.
        Err(BollardError::DockerResponseServerError {
            status_code: 409,
            message,
        }) if message.contains("already in progress") => {
            tracing::debug!(container = %id, "the container's removal is already under way");
            true
        }
        Err(e) => {
            tracing::warn!(container = %id, "cannot remove a container: {e}");
            false
        }
    }
}

/// Runs `work` to its end on a thread and a runtime of its own, and waits for it: for what
/// must be done while the caller's runtime is ending, or where there is none.
pub(crate) fn finish_apart(thread: &str, work: impl Future<Output = ()> + Send + 'static) {
    let _ = std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                rt.block_on(work);
            }
        })
        .map(std::thread::JoinHandle::join);
}
