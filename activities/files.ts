/**
 * JSON an activity writes or reads back, at a location of the artifact store (a local path or an `s3://` URI):
 * written atomically, so readers see the old object or the new one, never half of one.
 */
export { readJson, writeJson as writeJsonAtomic } from '../config/io/artifacts';
