// Types of cutpoint.mjs (turncut's cut points for Node; docs/cutpoints.md).

export declare const ENV_SOCKET: "TURNCUT_CUT_SOCKET";
export declare const ENV_ARM: "TURNCUT_CUT_ARM";
export declare const ENV_TRACE: "TURNCUT_CUT_TRACE";
export declare const ENV_ROLE: "TURNCUT_ROLE";
/** The occurrence of an arm written `#*`: every hit of its point. */
export declare const EVERY: 0;

/** A malformed TURNCUT_* environment. */
export declare class ConfigError extends Error {}

/** One armed occurrence: block at the `n`-th hit of `point` (`n` 0 = every). */
export interface Arm {
  point: string;
  n: number;
}

/** Parses a TURNCUT_CUT_ARM value (`a.b#2,runner.write.*#*`); throws ConfigError. */
export declare function parseArm(spec: string): Arm[];
/** Whether `arm` holds the `n`-th hit of `point`. */
export declare function armMatches(arm: Arm, point: string, n: number): boolean;
/** Reads the environment now (once); throws ConfigError when it is malformed. */
export declare function init(): void;
/** Whether hits do anything in this process. */
export declare function active(): boolean;
/** Marks the boundary `point`; held at the armed occurrence until the harness replies. */
export declare function hit(point: string): Promise<void>;
/** Marks the boundary before an operation that can fail; rejects with an Error
 * whose `code` is "EIO" or "ENOSPC" (with its `errno`) when the harness injects
 * that fault, or "CORRUPT" (no `errno`) when what it reads is to be corrupt. */
export declare function hitIo(point: string): Promise<void>;
