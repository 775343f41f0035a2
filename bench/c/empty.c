/* Does nothing. Linked against a chosen set of shared libraries (see bench/startup-breakdown.sh),
 * its run time is the cost of exec + loading, relocating and initialising those libraries alone. */
int main(void) { return 0; }
