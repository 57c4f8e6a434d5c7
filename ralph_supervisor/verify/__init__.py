"""Progress that is proven: the supervisor runs the project's tests itself and judges what they say.

`results` reads what a test command printed (JUnit XML, a runner's summary lines, or only its exit code);
`tampering` compares two snapshots' test files for tests weakened instead of code fixed. Both are pure.
"""
