#include <fprint.h>
