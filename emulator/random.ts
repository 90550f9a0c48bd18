// The emulator's seeded randomness is the project's one PRNG.
export { hashString, seededRandom } from '../config/random';
