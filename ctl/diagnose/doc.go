// Package diagnose answers "where did this stop, and whose job is it?" for
// an object of the fleet: from the object, the objects around it and its
// events, it names the stage where it is stuck, the owner of that stage and
// the facts that show why. The functions are pure, so each stuck stage is a
// unit test built from the object states the hub really holds.
package diagnose
