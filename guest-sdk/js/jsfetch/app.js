// jsfetch: the standard fetch() over wasi:http. warden checks each request against the
// policy's net grants before any connection; a refused one rejects the promise.

export async function fetchText(url) {
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw `${url}: ${e.message ?? e}`;
  }
  const body = await response.text();
  return `${response.status} ${body}`;
}
