"""A local GCS server for tests: ``python tests/gcs_emulator.py PORT BUCKET``.

It is ``gcp-storage-emulator`` (the GCS JSON API in Python, in memory, ``BUCKET`` created) with one addition that
real GCS has and TensorStore needs: a media download carries the object's generation in ``x-goog-generation``
(https://cloud.google.com/storage/docs/xml-api/reference-headers#xgooggeneration). Without it TensorStore reads
every object as generation 0, and its next conditional write (orbax's OCDBT manifest, at the second checkpoint)
fails with "Malformed StorageGeneration". The emulator does not enforce ``ifGenerationMatch`` preconditions
(its handlers never read them), so this server can test single-writer storage, not concurrent writers.
"""

import sys

from gcp_storage_emulator import server
from gcp_storage_emulator.handlers import objects

_download = objects.download


def _download_with_generation(request, response, storage, *args, **kwargs):
  _download(request, response, storage, *args, **kwargs)
  try:
    obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
  except Exception:  # noqa: BLE001  (not found: the 404 is already set)
    return
  response["x-goog-generation"] = str(obj["generation"])
  response["x-goog-metageneration"] = str(obj["metageneration"])


def main(port: int, bucket: str) -> None:
  objects.download = _download_with_generation  # objects.get(alt=media) calls it by name
  for _, methods in server.HANDLERS:
    for method, handler in methods.items():
      if handler is _download:
        methods[method] = _download_with_generation
  srv = server.create_server("127.0.0.1", port, in_memory=True, default_bucket=bucket)
  srv.run()


if __name__ == "__main__":
  main(int(sys.argv[1]), sys.argv[2])
